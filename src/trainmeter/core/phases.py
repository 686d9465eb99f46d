"""Phase clocks: training time versus everything else, synced at transitions only (docs/spec.md section 3)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from trainmeter.core.clock import Clock

PHASES: tuple[str, ...] = ("train", "data_wait", "eval", "checkpoint", "reporting", "profiling")
WEAK_PHASES = frozenset({"inference"})  # a model in eval mode: a span entered while it is outermost replaces it
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")  # a custom phase's name (tm.phase)


class PhaseClock:
    """Seconds per phase and the current window's training seconds (``synchronize``: at each transition)."""

    def __init__(self, clock: Clock, synchronize: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._sync = synchronize or (lambda: None)
        self.totals_s: dict[str, float] = {p: 0.0 for p in PHASES}
        self.window_train_s = 0.0
        self.session_start_s: float | None = None
        self._train_started_s: float | None = None

    training = property(lambda self: self._train_started_s is not None, doc="Whether a training segment is open.")

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

    def finish_phase(self, phase: str, started_s: float) -> None:
        """Credit ``phase`` with the time since ``started_s``."""
        self._sync()
        self.totals_s[phase] = self.totals_s.get(phase, 0.0) + max(0.0, self._clock() - started_s)

    def carve(self, phase: str, seconds: float) -> None:
        """Move host-measured ``seconds`` of the open training segment to ``phase`` (a data wait), without a sync."""
        if seconds <= 0:
            return
        self.totals_s[phase] = self.totals_s.get(phase, 0.0) + seconds
        if self._train_started_s is not None:
            self._train_started_s = min(self._clock(), self._train_started_s + seconds)

    def take_window_train_s(self) -> float:
        """Return and reset the window's closed training seconds."""
        window, self.window_train_s = self.window_train_s, 0.0
        return window

    def totals_now(self) -> dict[str, float]:
        """Per-phase seconds including the open training segment, without a sync."""
        totals = dict(self.totals_s)
        if self._train_started_s is not None:
            totals["train"] += max(0.0, self._clock() - self._train_started_s)
        return totals

    def session_elapsed_s(self, now_s: float) -> float:
        """Seconds since :meth:`begin` at ``now_s`` (0 before it)."""
        start_s = self.session_start_s
        return 0.0 if start_s is None else max(0.0, now_s - start_s)


def cuda_synchronize() -> Callable[[], None]:
    """A CUDA sync for phase transitions: ``torch.cuda.synchronize()`` when CUDA is initialised, else nothing."""
    torch = sys.modules.get("torch")

    def synchronize() -> None:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return synchronize


class PhaseSpans:
    """The outermost ``tm.phase`` (or wing span) open now: training paused, its time credited when it ends.
    ``on_edge(name, "begin"|"end", t_s)`` at each outermost span's edges; ``finished()``: training is not resumed."""

    def __init__(self, phases: PhaseClock, clock: Clock, on_edge: Callable[[str, str, float], None],
                 finished: Callable[[], bool]) -> None:
        self._phases = phases
        self._clock = clock
        self._on_edge = on_edge
        self._finished = finished
        self.depth = 0
        self.name = ""
        self.started_s = 0.0
        self._resume = False

    def enter(self, name: str) -> None:
        """Pause training and start crediting ``name`` (the outermost span wins, unless it is weak: then ``name``
        replaces it, its end edge sent, and its owner exits it no more)."""
        if self.depth == 1 and self.name in WEAK_PHASES and name != self.name:
            self._phases.finish_phase(self.name, self.started_s)
            now_s = self._clock()
            self._on_edge(self.name, "end", self._phases.session_elapsed_s(now_s))
            self.name, self.started_s = name, now_s
            self._on_edge(name, "begin", self._phases.session_elapsed_s(now_s))
            return
        self.depth += 1
        if self.depth > 1:
            return
        self.name = name
        self._resume = self._phases.training
        self._phases.pause_train()
        self.started_s = self._clock()
        self._on_edge(name, "begin", self._phases.session_elapsed_s(self.started_s))

    def exit(self) -> None:
        """Credit the span opened by :meth:`enter` and resume training (no-op when none is open)."""
        if self.depth == 0:
            return
        self.depth -= 1
        if self.depth:
            return
        self._phases.finish_phase(self.name, self.started_s)
        if self._resume and not self._finished():
            self._phases.resume_train()
        self._on_edge(self.name, "end", self._phases.session_elapsed_s(self._clock()))

    def open_for_s(self) -> float:
        """Seconds the open span has lasted (0 when none is open)."""
        return self._clock() - self.started_s if self.depth else 0.0

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` spent inside the open span out of it (a report made inside a long span)."""
        if self.depth:
            self.started_s += seconds

    def close(self) -> None:
        """Credit a span still open at the end (an exception or Ctrl-C inside it, or never exited)."""
        if self.depth:
            self.depth = 0
            self._phases.finish_phase(self.name, self.started_s)
