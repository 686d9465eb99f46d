"""A wing's cursor over the run's series: new points of the series it reads, nothing held back for the others.

With ``feed`` it also takes its points between reports (docs/spec.md section 18). Thread safety: :meth:`SeriesReader.new_points` under the reader's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Points = list[tuple[str, list[int], list[float]]]


class SeriesReader:
    """New points of the series named ``names``, read from a cursor of ``monitor``'s; ``feed`` takes the points a
    drain reads between reports (``None``: read at reports only)."""

    def __init__(self, monitor: Any, names: Iterable[str], feed: Callable[[Points], None] | None = None) -> None:
        self._m = monitor
        self._lock = threading.Lock()
        self._feed = feed
        self.names = frozenset(names)
        self._cursor: dict[str, int] = monitor.add_reader(None if feed is None else self._drain,
                                                          reads=self.names.__contains__)

    def _drain(self, ends: Mapping[str, int]) -> None:
        assert self._feed is not None
        points = self.new_points(ends)
        if points:
            self._feed(points)

    def new_points(self, ends: Mapping[str, int] | None = None) -> Points:
        """``(name, steps, values)`` of each read series' points since the last call, up to ``ends``
        (``Report.ends``; ``None``: now)."""
        out: Points = []
        with self._lock:
            for name, series in list(self._m.series.items()):
                if name in self.names:
                    start = self._cursor.get(name, 0)
                    end, steps, _, values = series.read(start, None if ends is None else ends.get(name, 0))
                    if steps:
                        out.append((name, steps, values))
                    self._cursor[name] = end
        return out
