"""Series: append-only columns of (step, seconds, value) with running stats.

The training thread appends without a lock (list appends are atomic under the
GIL); readers (the run-log writer, the widget publisher) read from a cursor and
the owner trims what every reader has seen, so memory stays bounded by what is
pending, not by run length.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesStats:
    """Running statistics of one series.

    Attributes:
        last: Last finite value, or ``None``.
        min: Smallest finite value, or ``None``.
        max: Largest finite value, or ``None``.
        count: Points recorded (finite or not).
        last_step: Step of the last point, or ``None``.
    """

    last: float | None
    min: float | None
    max: float | None
    count: int
    last_step: int | None

    def to_dict(self) -> dict[str, float | int | None]:
        """Return the passport's per-series entry."""
        return {"last": self.last, "min": self.min, "max": self.max, "count": self.count, "last_step": self.last_step}


class Series:
    """One named series. ``append`` from one thread; ``read``/``trim`` from any.

    Args:
        name: Series name, e.g. ``"train_loss"``.
        x_kind: ``"step"`` or ``"time"``: which x the series is drawn against.
    """

    __slots__ = ("name", "x_kind", "_steps", "_times", "_values", "_base", "_lock",
                 "_last", "_min", "_max", "_count", "_last_step")

    def __init__(self, name: str, x_kind: str = "step") -> None:
        self.name = name
        self.x_kind = x_kind
        self._steps: list[int] = []
        self._times: list[float] = []
        self._values: list[float] = []
        self._base = 0
        self._lock = threading.Lock()
        self._last: float | None = None
        self._min: float | None = None
        self._max: float | None = None
        self._count = 0
        self._last_step: int | None = None

    def append(self, step: int, t_s: float, value: float) -> None:
        """Record one point. Cheap; call from the writing thread only."""
        self._steps.append(step)
        self._times.append(t_s)
        self._values.append(value)
        self._count += 1
        self._last_step = step
        if value == value and value not in (math.inf, -math.inf):
            self._last = value
            if self._min is None or value < self._min:
                self._min = value
            if self._max is None or value > self._max:
                self._max = value

    @property
    def end(self) -> int:
        """Absolute position just past the last complete point."""
        return self._base + len(self._values)

    def read(self, start: int) -> tuple[int, list[int], list[float], list[float]]:
        """Return ``(end, steps, times_s, values)`` of the points from ``start`` on.

        Points already trimmed are skipped (the reader resumes at the oldest kept).
        Safe to call from any thread.
        """
        with self._lock:
            n = len(self._values)
            lo = max(0, start - self._base)
            return (self._base + n, self._steps[lo:n], self._times[lo:n], self._values[lo:n])

    def trim(self, upto: int) -> None:
        """Drop points before absolute position ``upto``. Safe from any thread."""
        with self._lock:
            k = min(len(self._values), max(0, upto - self._base))
            if k:
                del self._steps[:k]
                del self._times[:k]
                del self._values[:k]
                self._base += k

    @property
    def pending(self) -> int:
        """Points held in memory."""
        return len(self._values)

    def stats(self) -> SeriesStats:
        """Return the running statistics."""
        return SeriesStats(last=self._last, min=self._min, max=self._max, count=self._count, last_step=self._last_step)
