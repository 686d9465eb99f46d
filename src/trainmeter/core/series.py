"""Series: append-only columns of (step, seconds, value) with running stats; the writer appends without a lock,
readers read from a cursor and what every reader has seen is trimmed (docs/spec.md section 18).
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from dataclasses import dataclass
from operator import itemgetter

_INF = math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesStats:
    """Running statistics of one series: the last point's value (``None`` when not finite), min and max finite value,
    points recorded, the last point's step and the points that were not finite."""

    last: float | None
    min: float | None
    max: float | None
    count: int
    last_step: int | None
    nonfinite: int = 0
    last_read: float | None = None  # the latest point's value as read, NaN or inf included (the widget says which)

    def to_dict(self) -> dict[str, float | int | None]:
        """Return the passport's per-series entry (``nonfinite`` only when some points were not finite)."""
        out = {"last": self.last, "min": self.min, "max": self.max, "count": self.count, "last_step": self.last_step}
        return {**out, "nonfinite": self.nonfinite} if self.nonfinite else out


class Series:
    """One named series drawn against ``x_kind`` (``"step"`` or ``"time"``). ``append`` from one thread;
    ``read``/``trim`` from any."""

    __slots__ = ("name", "x_kind", "_steps", "_times", "_values", "_base", "lock",
                 "_min", "_max", "_folded", "_last_step", "_nonfinite", "origin", "_tail")

    def __init__(self, name: str, x_kind: str = "step", origin: int = 0) -> None:
        self.name = name
        self.x_kind = x_kind
        self._steps: list[int] = []
        self._times: list[float] = []
        self._values: list[float] = []
        self._base = 0
        self.lock = threading.Lock()  # readers and trims take it (held around a fork: Monitor.locks)
        self._min: float | None = None
        self._max: float | None = None
        self._folded = 0  # absolute position up to which the statistics are folded in
        self._last_step: int | None = None
        self._nonfinite = 0
        self._tail: float | None = None
        self.origin = origin  # added to every step read: a resumed run's points on the training's axis (spec section 22)

    def append(self, step: int, t_s: float, value: float) -> None:
        """Record one point (the statistics are folded in when read). Writing thread only."""
        self._steps.append(step)
        self._times.append(t_s)
        self._values.append(value)

    def open(self, step: int, t_s: float) -> None:
        """Begin the next point, its value appended later to :meth:`columns` (docs/spec.md section 20). Writer only."""
        self._steps.append(step)
        self._times.append(t_s)

    def columns(self) -> tuple[list[int], list[float], list[float]]:
        """The lists (steps, times, values) the writer appends to, never replaced. Writing thread only."""
        return self._steps, self._times, self._values

    def _fold(self) -> None:
        """Fold the points not yet seen into the running statistics (caller holds the lock)."""
        values = self._values
        n = len(values)  # values are appended last: points below n are complete
        lo = self._folded - self._base
        if lo >= n:
            return
        # no bytecode per point (docs/spec.md section 20): the finite values by C-level passes when they are all
        # floats; min/max keep the first extreme, as a strict compare does
        try:
            finite = list(filter(math.isfinite, values[lo:n]))
        except (TypeError, OverflowError):  # an int beyond float range (finite) or a non-number: compare each
            finite = [v for v in values[lo:n] if -_INF < v < _INF]
        low, high = self._min, self._max
        self._nonfinite += n - lo - len(finite)
        if finite:
            low = min(finite) if low is None else min(low, min(finite))
            high = max(finite) if high is None else max(high, max(finite))
        self._min, self._max, self._tail = low, high, values[n - 1]
        self._last_step = self._steps[n - 1]
        self._folded = self._base + n

    end = property(lambda self: self._base + len(self._values), doc="Position just past the last complete point.")

    def read(self, start: int, stop: int | None = None) -> tuple[int, list[int], list[float], list[float]]:
        """``(end, steps, times_s, values)`` from ``start`` up to ``stop`` (``None``: all); ``end``: the next start."""
        with self.lock:
            lo = max(0, start - self._base)
            hi = len(self._values) if stop is None else max(lo, min(len(self._values), stop - self._base))
            steps = self._steps[lo:hi]
            if self.origin:
                steps = list(map(self.origin.__add__, steps))  # in C: no bytecode per point
            return (self._base + hi, steps, self._times[lo:hi], self._values[lo:hi])

    def trim(self, upto: int) -> None:
        """Drop points before absolute position ``upto`` (their statistics are kept). Safe from any thread."""
        with self.lock:
            k = min(len(self._values), max(0, upto - self._base))
            if k:
                self._fold()
                del self._steps[:k]
                del self._times[:k]
                del self._values[:k]
                self._base += k

    pending = property(lambda self: len(self._values), doc="Points held in memory.")

    def stats(self) -> SeriesStats:
        """Return the running statistics (folds in the points appended since the last call). Any thread."""
        with self.lock:
            self._fold()
            tail = self._tail  # the latest point's value, never an earlier finite one
            last = tail if tail is not None and -_INF < tail < _INF else None
            return SeriesStats(last=last, min=self._min, max=self._max, count=self._base + len(self._values),
                               last_step=None if self._last_step is None else self._last_step + self.origin,
                               nonfinite=self._nonfinite, last_read=self._tail)


class StepSeries:
    """Tokens per optimizer step (position ``i`` is step ``i + 1``), read as a :class:`Series`: the times per step,
    the tokens as runs (position, tokens). One writing thread; ``read``/``trim`` any thread."""

    __slots__ = ("name", "x_kind", "times", "_runs", "_base", "lock", "tokens", "_min", "_max", "origin")

    def __init__(self, name: str) -> None:
        self.name = name
        self.x_kind = "step"
        self.times: list[float] = []  # the writer appends here directly (the hot path)
        self._runs: list[tuple[int, int]] = []  # (first absolute position, tokens), positions increasing
        self._base = 0
        self.lock = threading.Lock()  # readers and trims take it (held around a fork: Monitor.locks)
        self.tokens: int | None = None  # tokens of the current run
        self._min: int | None = None
        self._max: int | None = None
        self.origin = 0  # added to every step read, as Series.origin

    def set_tokens(self, tokens: int, step: int) -> None:
        """Start a run of ``tokens`` per step at step ``step``'s point, before its time is appended (the writer's
        step: a trim moves ``_base + len(times)`` in two writes, docs/spec.md section 20)."""
        self._runs.append((step - 1, tokens))
        self.tokens = tokens
        self._min = tokens if self._min is None else min(self._min, tokens)
        self._max = tokens if self._max is None else max(self._max, tokens)

    end = property(lambda self: self._base + len(self.times), doc="Position just past the last complete point.")

    def read(self, start: int) -> tuple[int, list[int], list[float], list[float]]:
        """Return ``(end, steps, times_s, tokens)`` of the points from ``start`` on (any thread)."""
        with self.lock:
            n = len(self.times)
            base = self._base
            lo = max(0, start - base)
            runs = list(self._runs)
            times = self.times[lo:n]
        first, last = base + lo, base + n
        values: list[float] = []
        for (at, tokens), (until, _) in itertools.pairwise([*runs, (last, 0)]):
            values.extend([tokens] * (min(until, last) - max(at, first)))  # none where the run lies outside
        return last, list(range(first + 1 + self.origin, last + 1 + self.origin)), times, values

    def trim(self, upto: int) -> None:
        """Drop points before absolute position ``upto`` (and the runs that ended before it)."""
        with self.lock:
            k = min(len(self.times), max(0, upto - self._base))
            if not k:
                return
            del self.times[:k]
            self._base += k
            del self._runs[:max(0, bisect.bisect_right(self._runs, self._base, key=itemgetter(0)) - 1)]

    pending = property(lambda self: len(self.times), doc="Points held in memory.")

    def stats(self) -> SeriesStats:
        """Running statistics of the tokens per step."""
        count = self._base + len(self.times)
        last = self._runs[-1][1] if self._runs and count else None
        return SeriesStats(last=last, min=self._min, max=self._max, count=count,
                           last_step=count + self.origin if count else None)
