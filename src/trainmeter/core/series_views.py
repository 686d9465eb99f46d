"""One decimated view per series of the live run: the widget's frames and ``curves.json`` read the same decimator.

One cursor reads each subscribed series' points once, on whichever thread asks first, into one
:class:`~trainmeter.core.decimate.Decimator` per series, with the smoothed twin a subscriber derives (docs/spec.md
sections 12 and 18); a saved run read back fills a view of its own with :meth:`SeriesViews.extend`. Thread safety:
every method takes :attr:`SeriesViews.lock`; a reader of :attr:`~SeriesViews.decimators` holds it.
:class:`SeriesReader`: a wing's own cursor over a few series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from trainmeter.core.decimate import DEFAULT_BUDGET_POINTS, Decimator

Points = list[tuple[str, list[int], list[float]]]
Twins = Callable[[str, Sequence[Any], Sequence[float]], "tuple[str, list[float]] | None"]
"""``(name, xs, values)`` -> ``(twin name, its values)`` or ``None`` (the loss EMA's fold: optim/smoothing.py)."""


def _read_new(series: Mapping[str, Any], cursor: dict[str, int], reads: Callable[[str], bool],
              ends: Mapping[str, int] | None) -> Iterator[tuple[str, Any, list[int], list[float], list[float]]]:
    """``(name, series, steps, times, values)`` of each series ``reads``, moving ``cursor`` up to ``ends``."""
    for name, s in list(series.items()):
        if reads(name):
            end, steps, times, values = s.read(cursor.get(name, 0), None if ends is None else ends.get(name, 0))
            cursor[name] = end
            yield name, s, steps, times, values


class SeriesViews:
    """The decimated series of one run (``series``, ``add_reader``: the registry's; ``None``: filled by
    :meth:`extend` only)."""

    def __init__(self, series: Callable[[], Mapping[str, Any]] | None = None,
                 add_reader: Callable[..., dict[str, int]] | None = None) -> None:
        self._series = series
        self._add_reader = add_reader
        self.new_run()

    def new_run(self) -> None:
        """No subscriber, no decimator (construction; a forked child's own run, whose wings subscribe again)."""
        self.lock = threading.Lock()
        self.decimators: dict[str, Decimator] = {}
        self.budget_points = DEFAULT_BUDGET_POINTS
        """Points each new decimator keeps: the smallest any subscriber asked for."""
        self._wants: dict[str, frozenset[str] | None] = {}  # replaced whole: reads() iterates it from any thread
        self._twins: Twins | None = None
        self._cursor: dict[str, int] | None = None

    def subscribe(self, key: str, names: Iterable[str] | None = None, *,
                  budget_points: int = DEFAULT_BUDGET_POINTS, twins: Twins | None = None) -> None:
        """Read series ``names`` (``None``: all) for ``key``, into decimators of at most ``budget_points``."""
        with self.lock:
            self._wants = {**self._wants, key: None if names is None else frozenset(names)}
            self.budget_points = min(self.budget_points, budget_points)
            if twins is not None:
                self._twins = twins
            if self._cursor is None and self._add_reader is not None:
                self._cursor = self._add_reader(self.catch_up, reads=self.reads)

    def unsubscribe(self, key: str) -> None:
        """Stop reading for ``key`` (its decimators stay as they are)."""
        with self.lock:
            self._wants = {k: v for k, v in self._wants.items() if k != key}

    def reads(self, name: str) -> bool:
        """Whether some subscriber reads series ``name`` (never the step series). Any thread."""
        series = self._series
        return series is not None and name in series() and any(n is None or name in n for n in self._wants.values())

    def catch_up(self, ends: Mapping[str, int] | None = None) -> bool:
        """Decimate the subscribed series' new points up to ``ends`` (``None``: now); whether any came."""
        with self.lock:
            cursor, series = self._cursor, self._series
            if cursor is None or series is None:
                return False
            fresh = False
            for name, s, steps, times, values in _read_new(series(), cursor, self.reads, ends):
                if values:
                    self._extend(name, s.x_kind, steps if s.x_kind == "step" else times, values)
                    fresh = True
            return fresh

    def extend(self, name: str, x_kind: str, xs: Sequence[Any], ys: Sequence[float]) -> bool:
        """Add points to series ``name``, one the view does not read, and to its twin; returns ``True``."""
        with self.lock:
            self._extend(name, x_kind, xs, ys)
        return True

    def _extend(self, name: str, x_kind: str, xs: Sequence[Any], ys: Sequence[float]) -> None:
        d = self.decimators.get(name)
        if d is None:
            d = self.decimators[name] = Decimator(name, x_kind, budget_points=self.budget_points)
        d.extend(xs, ys)
        twin = self._twins(name, xs, ys) if self._twins is not None else None
        if twin is not None:
            self._extend(twin[0], x_kind, xs, twin[1])


class SeriesReader:
    """New points of the series ``names`` from a cursor of ``monitor``'s; ``feed`` takes a drain's points."""

    def __init__(self, monitor: Any, names: Iterable[str], feed: Callable[[Points], None] | None = None) -> None:
        self._m = monitor
        self._lock = threading.Lock()
        self._feed = feed
        self.names = frozenset(names)
        self._cursor: dict[str, int] = monitor.add_reader(None if feed is None else self._drain,
                                                          reads=self.names.__contains__)

    def _drain(self, ends: Mapping[str, int]) -> None:
        points = self.new_points(ends)
        if points and self._feed is not None:
            self._feed(points)

    def new_points(self, ends: Mapping[str, int] | None = None) -> Points:
        """``(name, steps, values)`` of each series' points since the last call, up to ``ends`` (``None``: now)."""
        with self._lock:
            new = _read_new(self._m.series, self._cursor, self.names.__contains__, ends)
            return [(name, steps, values) for name, _, steps, _, values in new if steps]
