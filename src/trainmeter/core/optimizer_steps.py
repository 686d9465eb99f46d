"""Optimizer steps: the primary optimizer's steps counted, another's losses put in their own series."""

from __future__ import annotations

import sys
import weakref
from threading import get_ident
from typing import Any

from trainmeter.core.explicit_steps import Stepper, trained_parameters
from trainmeter.core.faults import fault_site
from trainmeter.core.loss_capture import LOSS_SERIES


class OptimizerSteps:
    """The general path of the optimizer step post-hook (the steady step's is core/wrappers.py's; both end in
    :meth:`StepRecorder.step <trainmeter.core.steps.StepRecorder.step>`), and the run's framework steppers.

    Attributes:
        general_steps: Lane 1's steps counted here (the others took the steady path).
        max_calls: The most root calls in one step.

    Training thread.
    """

    def __init__(self, hot: Any, steps: Any, monitor: Any, threads: Any, discovery: Any, loss: Any) -> None:
        self._hot = hot
        self._steps = steps
        self._monitor = monitor
        self._threads = threads
        self._discovery = discovery
        self._loss = loss
        self.on_other_step: Any = None  # fn(number, optimizer) after another optimizer's step (optim/ reads its rate)
        self._steppers: dict[tuple[str, int], Stepper] = {}  # (source, id(model)) -> its stand-in optimizer
        self.max_calls = 0
        self.reset()

    def reset(self) -> None:
        """No other optimizer, no step counted here yet (a forked child's own run)."""
        self._others: dict[int, int] = {}  # non-primary optimizer id -> its number (2, 3, ...), in stepping order
        self._refs: dict[int, weakref.ReferenceType[Any]] = {}  # number -> that optimizer
        self._losses: list[int] = []  # the numbers whose losses were kept
        self._numbered = 0  # numbers given
        self.general_steps = 0

    def other_numbers(self) -> list[int]:
        """The numbers (2, 3, ...) of the non-primary optimizers whose losses were kept."""
        return list(self._losses)

    def on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The general path of the step post-hook (:meth:`Wrappers.step_hook` takes the steady one)."""
        hot = self._hot
        if not hot.active:
            return
        try:
            lane = self._threads.thread_lane()  # another training thread than lane 1's (core/lane_probes.py)
            if lane is not None:
                self._threads.lane_step(lane, optimizer)
                return
            callback = hot.on_training
            if callback is not None:  # an optimizer step ends an open eval span (the time split)
                callback()
            primary = hot.primary_optimizer()
            discovery = self._discovery
            if primary is not optimizer:
                if primary is not None and not discovery.is_newer(optimizer):
                    self._on_other_step(optimizer)
                    return
                hot.primary = weakref.ref(optimizer)  # the first, or a sweep's new optimizer
                self._refs.pop(self._others.pop(id(optimizer), 0), None)
                discovery.new_primary()
            self.general_steps += 1
            discovery.on_primary_step(optimizer, sys._getframe(1))
            # the next steps of this optimizer may take the short path (see TorchProbes._refresh_fast)
            hot.steady = (discovery.root is not None and "trained" in discovery.params and hot.active
                          and not hot.paused_in(get_ident()) and hot.on_training is None)
            tokens, hot.pending_tokens = hot.pending_tokens, 0
            if hot.calls > self.max_calls:
                self.max_calls = hot.calls
            hot.calls = 0
            loss = self._loss.take()
            if loss is None and hot.fast_parts:  # the loss was read at backward (several parts, or a first step)
                self._steps.count(tokens, None, self._loss.take_fast())  # the step rule (or, for one step, its timer)
                return
            if loss is not None:
                self._loss.note(loss)
            self._steps.count(tokens, loss)
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}{fault_site(exc)}")

    def _on_other_step(self, optimizer: Any) -> None:
        """A secondary optimizer stepped: what was computed since the last step was its work. It is numbered at its
        first step (2, 3, ...: its ``train_loss.optimizer<N>`` and ``lr.optimizer<N>``)."""
        number = self._others.get(id(optimizer))
        if number is None or self._refs[number]() is not optimizer:
            self._numbered += 1
            number = self._others[id(optimizer)] = 1 + self._numbered
            self._refs[number] = weakref.ref(optimizer)
        if self.on_other_step is not None:
            self.on_other_step(number, optimizer)
        self._hot.pending_tokens = 0
        self._hot.calls = 0
        loss = self._loss.take()
        if loss is None and self._hot.fast_parts:
            loss = self._loss.fast_loss()
        if loss is not None:
            if number not in self._losses:
                self._losses.append(number)
            loss.series = f"{LOSS_SERIES}.optimizer{number}"
            self._steps.add_loss(loss)

    # -- steps no torch.optim hook sees (core/explicit_steps.py) --------------------------------
    def stepper(self, source: str, model: Any) -> Stepper:
        """The run's stepper for ``source`` and ``model``, made (and ``model`` watched as a candidate) once."""
        key = (source, id(model) if model is not None else 0)
        found = self._steppers.get(key)
        if found is not None:
            return found
        found = self._steppers[key] = Stepper(source, trained_parameters(model) if model is not None else [])
        if model is not None:
            # as at a torch optimizer's construction (core/discovery.py): the model becomes a candidate
            self._discovery.note_optimizer(found, [model])
            if self._hot.primary is None:  # the first to step: no torch optimizer's root is dropped for it
                self._hot.primary = weakref.ref(found)
        return found
