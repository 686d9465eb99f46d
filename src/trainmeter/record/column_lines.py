"""The run log's column records encoded ahead: the report worker turns a series' new points into JSON between reports.

The report joins them with the rest, byte for byte the line ``RunLog.append`` writes (docs/spec.md section 20); a
piece is used only while its cursor holds and nothing past it was trimmed. :meth:`ColumnLines.encode_ahead` on the
worker, :meth:`ColumnLines.line` at reports; each entry is an immutable tuple replaced whole.

The step series' steps and microseconds are encoded once: a series whose points were recorded by the step rule
(the very time objects of the step series, at consecutive steps: the captured ``train_loss``) joins the same
element strings; the step series' tokens, one value a run, repeat the value's text.
"""

from __future__ import annotations

import json
from itertools import repeat
from operator import is_
from typing import Any

from trainmeter.core.series import StepSeries
from trainmeter.record.events import SCHEMA_VERSION
from trainmeter.record.runlog import compact_json

_SEPARATORS = (",", ":")
_US_PER_S = 1e6
# name -> (cursor it starts at, position it ends at, step, t_us and value JSON pieces: comma-joined elements)
Entry = tuple[int, int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
# the step series' last chunk: its first step, its times, and the JSON of each step and each t_us
Shared = tuple[int, list[float], list[str], list[str]]


def elements(values: list[Any]) -> str:
    """The JSON of ``values``' elements, comma-separated (a list's JSON without its brackets), as RunLog writes it."""
    return compact_json(values)[1:-1]


def micros(times_s: list[float]) -> list[int]:
    """Seconds to integer microseconds, as the run log writes them (``int(t * 1e6)``, bit for bit)."""
    return list(map(int, map(_US_PER_S.__mul__, times_s)))


def upto(read: tuple[int, list[int], list[float], list[float]], stop: int | None
         ) -> tuple[int, list[int], list[float], list[float]]:
    """A ``Series.read`` result cut at absolute position ``stop`` (``None``: whole)."""
    end, steps, times, values = read
    if stop is None or end <= stop:
        return read
    keep = max(0, len(values) - (end - stop))
    return stop, steps[:keep], times[:keep], values[:keep]


class ColumnLines:
    """Column JSON of each series encoded ahead of the report (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._shared: Shared | None = None  # replaced whole: any one read is consistent

    def encode_ahead(self, series_list: list[Any], cursors: dict[str, int]) -> None:
        """Encode each series' points appended since its last piece (the report worker's thread); the step series
        first, so the others may join its strings."""
        for series in series_list:
            self._extend(series, cursors.get(series.name, 0))

    def _extend(self, series: Any, start: int, stop: int | None = None) -> Entry | None:
        """``series``' entry from cursor ``start`` with its points since the last piece (up to ``stop``) encoded;
        ``None`` when trimmed past the piece (the record is then encoded whole)."""
        entry = self._entries.get(series.name)
        if entry is None or entry[0] != start:
            entry = (start, start, (), (), ())
        at = entry[1]
        if series.end - series.pending > at:
            return None
        end, steps, times, values = upto(series.read(at), stop)
        if end - len(values) != at:
            return None
        if steps:
            pieces = zip(entry[2:], self._encode(series, steps, times, values), strict=True)
            entry = self._entries[series.name] = (start, end, *(have + (new,) for have, new in pieces))
        return entry

    def _encode(self, series: Any, steps: list[int], times: list[float], values: list[Any]) -> tuple[str, str, str]:
        """The step, t_us and value JSON of one chunk of ``series``' points (elements, comma-joined)."""
        if isinstance(series, StepSeries):
            step_strs, us_strs = list(map(str, steps)), list(map(str, micros(times)))
            own = ",".join(step_strs), ",".join(us_strs)
            # the point before, where a loss lags one
            if (last := self._shared) is not None and last[0] + len(last[1]) == steps[0]:
                step_strs.insert(0, last[2][-1])
                us_strs.insert(0, last[3][-1])
                times = [last[1][-1], *times]
            self._shared = (steps[0] - len(step_strs) + len(steps), times, step_strs, us_strs)
            if values.count(values[0]) == len(values) and set(map(type, values)) == {int}:  # one run of ints: one text
                return *own, ",".join(repeat(elements(values[:1]), len(values)))
            return *own, elements(values)
        shared, n = self._shared, len(steps)
        if shared is not None:
            first, shared_times, step_strs, us_strs = shared
            i = steps[0] - first if type(steps[0]) is int else -1
            if 0 <= i and i + n <= len(shared_times) and all(map(is_, times, shared_times[i:i + n])) \
                    and steps == list(range(steps[0], steps[0] + n)):
                return ",".join(step_strs[i:i + n]), ",".join(us_strs[i:i + n]), elements(values)
        return elements(steps), elements(micros(times)), elements(values)

    def line(self, kind: str, series: Any, start: int, stop: int | None = None) -> tuple[str, int] | None:
        """The record's JSON line of ``series``' points from ``start`` (the log's cursor), up to ``stop`` when given,
        and the position after them; ``None`` without a usable piece. The report's thread."""
        entry = self._entries.get(series.name)
        if entry is None or entry[0] != start or entry[1] == start or series.end - series.pending > start \
                or (stop is not None and entry[1] > stop):  # (the piece runs past the report: encoded whole)
            return None
        if (entry := self._extend(series, start, stop)) is None:
            return None
        step_json, us_json, value_json = map(",".join, entry[2:])
        head = json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind, "name": series.name, "x": series.x_kind},
                          separators=_SEPARATORS)[:-1]
        return f'{head},"step":[{step_json}],"t_us":[{us_json}],"value":[{value_json}]}}', entry[1]
