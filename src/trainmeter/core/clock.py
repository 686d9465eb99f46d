"""Clocks: the only place trainmeter reads time (tests inject :class:`FakeClock`)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in seconds. Implementations are safe to call from any thread."""

    def __call__(self) -> float:
        """Return monotonic time in seconds."""


class MonotonicClock:
    """``time.perf_counter`` as a :class:`Clock`. Safe to call from any thread."""

    __slots__ = ()
    __call__ = staticmethod(time.perf_counter)  # no Python frame of its own


class FakeClock:
    """A clock that moves only when told to, from ``start_s``; for tests."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = float(start_s)

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (must be >= 0)."""
        if seconds < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance({seconds!r}))")
        self.now_s += seconds
