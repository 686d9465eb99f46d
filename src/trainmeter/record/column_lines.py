"""The run log's column records encoded ahead: the report worker turns a series' new points into JSON between reports.

The report joins them with the rest, byte for byte the line ``RunLog.append`` writes (docs/spec.md section 20); a
piece is used only while its cursor holds and nothing past it was trimmed. :meth:`ColumnLines.encode_ahead` on the
worker, :meth:`ColumnLines.line` at reports; each entry is an immutable tuple replaced whole.
"""

from __future__ import annotations

import json
from typing import Any

from trainmeter.record.events import SCHEMA_VERSION
from trainmeter.record.runlog import compact_json

_SEPARATORS = (",", ":")
_US_PER_S = 1e6
# name -> (cursor it starts at, position it ends at, step JSON, t_us JSON, value JSON): comma-joined elements
Entry = tuple[int, int, str, str, str]


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


def _join(a: str, b: str) -> str:
    return f"{a},{b}" if a and b else a or b


class ColumnLines:
    """Column JSON of each series encoded ahead of the report (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def encode_ahead(self, series_list: list[Any], cursors: dict[str, int]) -> None:
        """Encode each series' points appended since its last piece (the report worker's thread)."""
        for series in series_list:
            name = series.name
            start = cursors.get(name, 0)
            entry = self._entries.get(name)
            if entry is None or entry[0] != start:
                entry = (start, start, "", "", "")
            at = entry[1]
            if series.end - series.pending > at:
                continue  # trimmed past the piece: the report encodes the record whole
            end, steps, times, values = series.read(at)
            if not steps or end - len(values) != at:
                continue
            self._entries[name] = (start, end, _join(entry[2], elements(steps)),
                                   _join(entry[3], elements(micros(times))), _join(entry[4], elements(values)))

    def line(self, kind: str, series: Any, start: int, stop: int | None = None) -> tuple[str, int] | None:
        """The record's JSON line of ``series``' points from ``start`` (the log's cursor), up to ``stop`` when given,
        and the position after them; ``None`` without a usable piece. The report's thread."""
        entry = self._entries.get(series.name)
        if entry is None or entry[0] != start or entry[1] == start or series.end - series.pending > start:
            return None
        at = entry[1]
        if stop is not None and at > stop:
            return None  # the piece runs past the report: the record is encoded whole
        end, steps, times, values = upto(series.read(at), stop)
        if end - len(values) != at:
            return None
        step_json, us_json, value_json = entry[2], entry[3], entry[4]
        if steps:
            step_json = _join(step_json, elements(steps))
            us_json = _join(us_json, elements(micros(times)))
            value_json = _join(value_json, elements(values))
        head = json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind, "name": series.name, "x": series.x_kind},
                          separators=_SEPARATORS)[:-1]
        return f'{head},"step":[{step_json}],"t_us":[{us_json}],"value":[{value_json}]}}', end
