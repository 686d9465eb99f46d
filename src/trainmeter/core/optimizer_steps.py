"""Optimizer steps: the primary optimizer's steps counted, another's losses put in their own series."""

from __future__ import annotations

import sys
import weakref
from typing import Any

from trainmeter.core.discovery import DISCOVERY_STEPS
from trainmeter.core.loss_capture import LOSS_SERIES


class OptimizerSteps:
    """The optimizer step post-hook (a part of :class:`~trainmeter.core.probes.TorchProbes`). Training thread."""

    _active: bool

    def _is_newer(self, optimizer: Any) -> bool:
        """A non-primary optimizer built after the primary's last step (a sweep's next model)."""
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            return True
        created = self._created.get(id(optimizer))
        return created is not None and created[0]() is optimizer and created[1] > self._primary_last_event

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The general path of the step post-hook (:meth:`Wrappers._make_step_hook` takes the steady one)."""
        if not self._active:
            return
        try:
            lane = self._thread_lane()  # another training thread than lane 1's (core/lane_probes.py)
            if lane is not None:
                self._lane_step(lane, optimizer)
                return
            callback = self._on_training
            if callback is not None:  # an optimizer step ends an open eval span (the time split)
                callback()
            primary = self._primary() if self._primary is not None else None
            if primary is not optimizer:
                if primary is not None and not self._is_newer(optimizer):
                    self._on_other_step(optimizer)
                    return
                self._primary = weakref.ref(optimizer)  # the first, or a sweep's new optimizer
                self._others.pop(id(optimizer), None)
                self._root = None
                self._root_id = 0
                self.hot.steady = False
                self._refresh_fast()
                self._gave_up = False
            self._events += 1
            self._general_steps += 1
            self._primary_last_event = self._events
            if self._root is None and not self._gave_up:
                if not self._choose_root(optimizer, sys._getframe(1)) and self._steps.steps + 1 >= DISCOVERY_STEPS:
                    self._gave_up = True
                    self._monitor.warn_once("probe-root", self._no_root_message())
            elif "trained" not in self.params:
                trained = self._trained(optimizer)
                self.params.update(trained=sum(trained.values()), optimizer_tensors=len(trained))
            if self._candidate_calls:
                self._candidate_calls = False
                for candidate in self._candidates.values():
                    candidate.tokens = candidate.calls = 0
            # the next steps of this optimizer may take the short path (see _refresh_fast)
            self.hot.steady = (self._root is not None and "trained" in self.params and self._active
                            and not self._paused and self._on_training is None)
            tokens, self.hot.pending_tokens = self.hot.pending_tokens, 0
            if self.hot.calls > self._max_calls:
                self._max_calls = self.hot.calls
            self.hot.calls = 0
            loss, self._loss = self._loss, None
            self._refresh_fast()  # the loss may take the backward fast path again
            parts = self.hot.fast_parts
            if loss is None and parts:  # hot path: the loss was read at backward (inline _note)
                info = self._losses_info
                info["steps"] += 1
                if parts > 1:
                    if parts > info["max_parts"]:
                        info["max_parts"] = parts
                    if self.hot.fast_divided:
                        info["divided"] += 1
                    else:
                        info["ambiguous"] += 1
                elif not info["max_parts"]:
                    info["max_parts"] = 1
                value = self.hot.fast_sum
                self.hot.fast_parts = 0  # inline clear_fast_loss: a step of several parts (accumulation) comes here
                self.hot.fast_sum = 0.0
                self.hot.fast_divided = True
                self.hot.fast_first = None
                self._steps.count(tokens, None, value)  # the step rule (or, for one step, its timer)
                return
            if loss is not None:
                self._note(loss)
            self._steps.count(tokens, loss)
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}")

    def _on_other_step(self, optimizer: Any) -> None:
        """A secondary optimizer stepped: what was computed since the last step was its work."""
        self.hot.pending_tokens = 0
        self.hot.calls = 0
        loss, self._loss = self._loss, None
        self._refresh_fast()
        if loss is None and self.hot.fast_parts:
            loss = self._fast_loss()
        if loss is not None:
            number = self._others.setdefault(id(optimizer), len(self._others) + 2)
            loss.series = f"{LOSS_SERIES}.optimizer{number}"
            self._steps.add_loss(loss)

