"""Per-rank step timing from this rank's own clock: step time, and the part outside backward (docs/spec.md section
19, "Stragglers"). One optimizer post-hook and a ``Tensor.backward`` wrapper: clock reads, no sync. Training thread.
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from typing import Any


class StepTiming:
    """Installs the timing hooks for one run and sums them per report window (``Tensor.backward`` is wrapped; the
    probes wrap ``torch.autograd.backward``, another function, so either may be removed first)."""

    def __init__(self) -> None:
        self._torch: Any = None
        self._handle: Any = None
        self._base: Any = None
        self._patched: Any = None
        self._primary: weakref.ReferenceType[Any] | None = None
        self._last_s: float | None = None
        self._backward_s = 0.0
        self.steps = 0  # timed steps (the first is not)
        self.step_s_sum = 0.0
        self.outside_s_sum = 0.0
        self._window_from = (0, 0.0, 0.0)  # the sums above when the report window began
        self.best_window_outside_s: float | None = None
        self.best_window_step_s: float | None = None
        self.last_window: dict[str, Any] = {}

    def start(self) -> None:
        """Install the optimizer post-hook and the backward wrapper (imports torch)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._torch = torch
        self._handle = register_optimizer_step_post_hook(self._on_step)
        base = torch.Tensor.backward
        self._base = base
        timing = self

        @functools.wraps(base)
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return base(tensor, *args, **kwargs)
            finally:
                timing._backward_s += time.perf_counter() - t0

        self._patched = backward
        torch.Tensor.backward = backward  # type: ignore[method-assign]

    def stop(self) -> None:
        """Remove the hook and the wrapper (idempotent); leave torch as it was before the run."""
        if self._handle is not None:
            with contextlib.suppress(Exception):
                self._handle.remove()
            self._handle = None
        torch = self._torch
        if torch is not None and self._patched is not None:
            if torch.Tensor.backward is self._patched:  # another wrapper on top of ours: leave both
                torch.Tensor.backward = self._base  # type: ignore[method-assign]
            self._patched = None

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        now = time.perf_counter()
        last, self._last_s = self._last_s, now
        backward_s, self._backward_s = self._backward_s, 0.0
        if last is not None:
            self.steps += 1
            self.step_s_sum += now - last
            self.outside_s_sum += max(0.0, now - last - backward_s)

    def take_window(self) -> dict[str, Any]:
        """The report window's means (seconds per step) and the run's so far; resets the window."""
        steps, step_s, outside_s = self._window_from
        n = self.steps - steps
        window: dict[str, Any] = {"steps": n, "step_s": None, "outside_backward_s": None}
        if n:
            window["step_s"] = step = (self.step_s_sum - step_s) / n
            window["outside_backward_s"] = outside = (self.outside_s_sum - outside_s) / n
            best_step, best_outside = self.best_window_step_s, self.best_window_outside_s
            self.best_window_step_s = step if best_step is None else min(step, best_step)
            self.best_window_outside_s = outside if best_outside is None else min(outside, best_outside)
        self._window_from = (self.steps, self.step_s_sum, self.outside_s_sum)
        self.last_window = window
        return self.summary(window)

    def summary(self, window: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run means, best window means, and ``window`` (the last one when omitted)."""
        n = self.steps
        return {"timed_steps": n, "step_s": self.step_s_sum / n if n else None,
                "outside_backward_s": self.outside_s_sum / n if n else None,
                "best_window_step_s": self.best_window_step_s,
                "best_window_outside_backward_s": self.best_window_outside_s,
                "window": dict(self.last_window if window is None else window)}
