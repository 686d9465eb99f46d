"""A wing's cursor over the run's series: new points of the series it reads, nothing held back for the others.

A reader registered with ``Monitor.add_reader`` holds back the trimming of every series until its cursor
moves past the points; a wing that reads a few series (the verdicts' and the curves' loss) moves past the
others at once, so registering never keeps points in memory it will not read.

Thread safety: one thread at a time per reader (the report's: the training thread, or the report worker for a
steady report).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class SeriesReader:
    """New points of the series named ``names``, read from a cursor of ``monitor``'s.

    Args:
        monitor: The run (``add_reader``, ``series``, ``step_series``).
        names: The series whose points are read; every other series is skipped.
    """

    def __init__(self, monitor: Any, names: Iterable[str]) -> None:
        self._m = monitor
        self._cursor: dict[str, int] = monitor.add_reader()
        self.names = frozenset(names)

    def new_points(self, ends: Mapping[str, int] | None = None) -> list[tuple[str, list[int], list[float]]]:
        """``(name, steps, values)`` of each read series' points since the last call (oldest first).

        Args:
            ends: Each series' end at the report (``Report.ends``, a report read later on the report worker):
                the points past it are left for the next call. ``None``: every point up to now.
        """
        m, cursor = self._m, self._cursor
        out: list[tuple[str, list[int], list[float]]] = []
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
                cursor[name] = series.end if ends is None else ends.get(name, 0)
        cursor[m.step_series.name] = m.step_series.end
        return out
