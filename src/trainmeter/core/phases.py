"""Phase clocks: training time versus everything else (docs/spec.md section 3).

A session begins once; training time is accumulated in segments between
``resume_train`` and ``pause_train``; auxiliary phases (eval, checkpoint,
reporting, profiling, data_wait or a custom name) are credited with their own
durations. On CUDA the injected ``synchronize`` runs at phase transitions only,
so asynchronous work is bounded there and never after every step.

Not thread-safe: call from the training thread.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from trainmeter.core.clock import Clock

PHASES: tuple[str, ...] = ("train", "data_wait", "eval", "checkpoint", "reporting", "profiling")


def _no_sync() -> None:
    return None


class PhaseClock:
    """Cumulative seconds per phase, plus the training seconds of the current window.

    Args:
        clock: Monotonic clock in seconds.
        synchronize: Called at each phase transition (``torch.cuda.synchronize``
            on CUDA, nothing on CPU).
    """

    def __init__(self, clock: Clock, synchronize: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._sync = synchronize or _no_sync
        self.totals_s: dict[str, float] = {p: 0.0 for p in PHASES}
        self.window_train_s = 0.0
        self.session_start_s: float | None = None
        self._train_started_s: float | None = None

    @property
    def training(self) -> bool:
        """Whether a training segment is open."""
        return self._train_started_s is not None

    def begin(self) -> float:
        """Start the session; returns its start time in seconds."""
        self._sync()
        self.session_start_s = self._clock()
        return self.session_start_s

    def resume_train(self) -> None:
        """Open a training segment (no-op if one is open)."""
        if self._train_started_s is not None:
            return
        self._sync()
        self._train_started_s = self._clock()

    def pause_train(self) -> float:
        """Close the open training segment; returns its seconds (0 if none was open)."""
        if self._train_started_s is None:
            return 0.0
        self._sync()
        elapsed = max(0.0, self._clock() - self._train_started_s)
        self._train_started_s = None
        self.totals_s["train"] += elapsed
        self.window_train_s += elapsed
        return elapsed

    def finish_phase(self, phase: str, started_s: float) -> float:
        """Credit ``phase`` with the time since ``started_s``; returns those seconds."""
        self._sync()
        elapsed = max(0.0, self._clock() - started_s)
        self.totals_s[phase] = self.totals_s.get(phase, 0.0) + elapsed
        return elapsed

    def carve(self, phase: str, seconds: float) -> None:
        """Move ``seconds`` of the open training segment to ``phase``, without a sync.

        For host-side spans measured inside a training segment (a data wait):
        the segment's start moves forward, so the seconds count once.
        """
        if seconds <= 0:
            return
        self.totals_s[phase] = self.totals_s.get(phase, 0.0) + seconds
        if self._train_started_s is not None:
            self._train_started_s = min(self._clock(), self._train_started_s + seconds)

    def take_window_train_s(self) -> float:
        """Return and reset the window's closed training seconds."""
        window = self.window_train_s
        self.window_train_s = 0.0
        return window

    def totals_now(self) -> dict[str, float]:
        """Per-phase seconds including the open training segment, without a sync."""
        totals = dict(self.totals_s)
        if self._train_started_s is not None:
            totals["train"] += max(0.0, self._clock() - self._train_started_s)
        return totals

    def session_elapsed_s(self, now_s: float) -> float:
        """Seconds since :meth:`begin` at ``now_s`` (0 before it)."""
        if self.session_start_s is None:
            return 0.0
        return max(0.0, now_s - self.session_start_s)


def cuda_synchronize() -> Callable[[], None]:
    """A CUDA sync for phase transitions: ``torch.cuda.synchronize()`` when CUDA is initialised, else nothing."""
    torch = sys.modules.get("torch")

    def synchronize() -> None:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return synchronize
