"""The root's training calls: each batch counted (tokens), one batch kept for the FLOP count.

The kept batch is what the root was called with: a forward's inputs, or a LightningModule's
``training_step`` arguments (its batch and ``batch_idx``), which the counted pass gives to the
copy's own ``training_step`` (docs/spec.md section 5, "The counted pass")."""

from __future__ import annotations

import threading
from typing import Any

from trainmeter.core.batch import count_batch, last_seq
from trainmeter.core.seq_weights import TokenWeightedSeq


class RootCalls:
    """Per call of a watched module (a part of :class:`~trainmeter.core.probes.TorchProbes`). Training thread."""

    example: tuple[Any, Any] | None
    seq_weights: TokenWeightedSeq

    def _on_call(self, module: Any, args: Any, kwargs: Any, lightning: bool) -> None:
        if self._paused and (not self._threaded or self._paused_ident == threading.get_ident()):
            return  # our own FLOP count runs in this thread (another thread's training goes on)
        if not (lightning or self._torch.is_grad_enabled()):
            return
        candidate = self._candidates.get(id(module))
        if candidate is None or candidate.ref() is not module:
            return
        try:
            counted = count_batch(args[:1] if lightning else args, kwargs)
            if id(module) == self._root_id:
                if self.example is None:  # a LightningModule's: its training_step (batch, batch_idx)
                    self._capture_example(args, kwargs)
                elif lightning and self.autocast_dtype is None:  # its precision plugin's autocast is on here
                    self.autocast_dtype = self._autocast()
                if counted is not None:
                    self.seq_weights.at(self._steps.tokens + self.hot.pending_tokens, last_seq())
                    self.hot.pending_tokens += counted[0]
                    self._monitor.set_token_unit(counted[1])
                # remember a positional batch's shape: the call wrapper counts the next ones like it
                first = args[0] if args and not kwargs else None
                if not lightning and counted is not None and hasattr(first, "is_floating_point"):
                    self.hot.last_type, self.hot.last_shape, self.hot.last_dtype = type(first), first.shape, first.dtype
                    self.hot.last_tokens = counted[0]
                    self.hot.fast_calls = self.example is not None
                else:
                    self.hot.fast_calls = False
                self._refresh_fast()
                self.hot.calls += 1
                callback = self._on_training
                if callback is not None and (lightning or module.training):
                    callback()
            else:
                self._candidate_calls = True
                self.hot.steady = False
                candidate.calls += 1
                if candidate.example is None and self._root is None:
                    candidate.example = (args, dict(kwargs or {}), self._autocast())
                if counted is not None:
                    candidate.tokens += counted[0]
                    candidate.unit = counted[1]
        except Exception as exc:
            self._monitor.warn_once("probe-tokens", f"token counting disabled: {exc!r}")
            self.paused = True


    def _capture_example(self, args: Any, kwargs: Any) -> None:
        """Keep one training batch (for the counted FLOPs) and the autocast dtype."""
        self.example = (args, dict(kwargs or {}))
        self.autocast_dtype = self._autocast()

    def _autocast(self) -> str | None:
        torch = self._torch
        try:
            for device in ("cuda", "cpu"):
                if torch.is_autocast_enabled(device):
                    return str(torch.get_autocast_dtype(device))
        except Exception:
            pass
        return None

    @property
    def example_pending(self) -> bool:
        """The root is known and a training batch of it will be kept at its next training call."""
        candidate = self._candidates.get(self._root_id) if self._root is not None else None
        return candidate is not None and self.example is None

    def release_example(self) -> None:
        """Drop the kept batch (after the FLOP count).

        An empty example, not ``None``, so the call wrapper does not capture another.
        """
        self.example = None if self.example is None else ((), {})

