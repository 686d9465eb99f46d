"""A wing's cursor over the run's series: new points of the series it reads, nothing held back for the others.

A reader registered with ``Monitor.add_reader`` holds back the trimming of every series until its cursor
moves past the points; a wing that reads a few series (the verdicts' and the curves' loss) moves past the
others at once, so registering never keeps points in memory it will not read. With ``feed`` the reader also
takes its points between reports when a series holds many (``SeriesRegistry`` drains, docs/spec.md section 18),
so the points held stay bounded whatever the step rate.

Thread safety: :meth:`SeriesReader.new_points` under the reader's lock (a report's thread, or the report worker
for a steady report or a drain).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Points = list[tuple[str, list[int], list[float]]]


class SeriesReader:
    """New points of the series named ``names``, read from a cursor of ``monitor``'s.

    Args:
        monitor: The run (``add_reader``, ``series``, ``step_series``).
        names: The series whose points are read; every other series is skipped.
        feed: Takes the points read by a drain between reports (the report worker); ``None``: read at reports only.
    """

    def __init__(self, monitor: Any, names: Iterable[str], feed: Callable[[Points], None] | None = None) -> None:
        self._m = monitor
        self._lock = threading.Lock()
        self._feed = feed
        self._cursor: dict[str, int] = monitor.add_reader(None if feed is None else self._drain)
        self.names = frozenset(names)

    def _drain(self, ends: Mapping[str, int]) -> None:
        assert self._feed is not None
        points = self.new_points(ends)
        if points:
            self._feed(points)

    def new_points(self, ends: Mapping[str, int] | None = None) -> Points:
        """``(name, steps, values)`` of each read series' points since the last call (oldest first).

        Args:
            ends: Each series' end at the report (``Report.ends``, a report read later on the report worker):
                the points past it are left for the next call. ``None``: every point up to now.
        """
        with self._lock:
            return self._read(ends)

    def _read(self, ends: Mapping[str, int] | None) -> Points:
        m, cursor = self._m, self._cursor
        out: Points = []
        for name, series in list(m.series.items()):
            if name in self.names:
                end, steps, _, values = series.read(cursor.get(name, 0))
                if ends is not None and end > ends.get(name, 0):
                    stop = ends.get(name, 0)
                    keep = max(0, len(values) - (end - stop))
                    end, steps, values = max(stop, end - len(values)), steps[:keep], values[:keep]
                if steps:
                    out.append((name, steps, values))
                cursor[name] = end
            else:  # not read: never hold back trimming
                cursor[name] = series.end if ends is None else max(cursor.get(name, 0), ends.get(name, 0))
        cursor[m.step_series.name] = m.step_series.end
        return out
