"""The run log's writer: an append-only ``events.jsonl``, flushed at every report; the record's JSON helpers; the
column records encoded ahead.

:class:`RunLog`: the training thread's (the heartbeat's one-line :meth:`RunLog.write_now`: any thread). The records and
their reader are :mod:`trainmeter.record.events`.

:class:`ColumnLines`: the report worker turns a series' new points into JSON between reports; the report joins them
with the rest, byte for byte the line :meth:`RunLog.write` writes (docs/spec.md section 20); a piece is used only while
its cursor holds and nothing past it was trimmed. :meth:`ColumnLines.encode_ahead` on the worker,
:meth:`ColumnLines.line` at reports; each entry is an immutable tuple replaced whole. The step series' steps and
microseconds are encoded once: a series whose points were recorded by the step rule (the very time objects of the step
series, at consecutive steps: the captured ``train_loss``) joins the same element strings; the step series' tokens,
one value a run, repeat the value's text.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from itertools import repeat
from operator import is_
from pathlib import Path
from typing import Any

from trainmeter.core.series import StepSeries
from trainmeter.record.events import SCHEMA_VERSION, read_events

__all__ = ["ColumnLines", "RunLog", "clean", "compact_json", "json_lines", "micros", "read_events", "upto",
           "write_file_atomic"]

_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # the C encoder; a NaN or inf raises


def clean(value: Any) -> Any:
    """Return ``value`` with non-finite floats replaced by ``None`` (JSON-safe)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def compact_json(value: Any) -> str:
    """``value`` as compact JSON, non-finite floats as ``null`` (``clean`` runs only when one is there)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(clean(value), separators=(",", ":"))


def json_lines(doc: dict[str, Any]) -> str:
    """``doc`` as JSON with one top-level key a line, each value compact, non-finite floats as ``null`` (parses to
    ``json.dumps(clean(doc))``'s object; docs/spec.md section 20). ``TypeError``: a value JSON cannot encode."""
    encode = _STRICT.encode
    try:
        parts = []
        for key, value in doc.items():
            if not isinstance(key, str):
                raise TypeError(key)
            text = encode(value)
            # a bool or None key (the C encoder spells it true, false, null; clean(): str(key)), or a str key so spelled
            if '"true":' in text or '"false":' in text or '"null":' in text:
                raise TypeError(key)
            parts.append(f"  {encode(key)}: {text}")
    except (TypeError, ValueError):  # a NaN or inf, an odd key, or a value clean() does not fix (raised below)
        parts = [f"  {encode(k)}: {encode(v)}" for k, v in clean(doc).items()]
    return "{\n" + ",\n".join(parts) + "\n}" if parts else "{}"


class RunLog:
    """Writes one JSON object per line to ``path`` (created with its folder), buffered until :meth:`flush`: one
    append, cut back to the last whole line when it fails (a full disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._lines: list[str] = []

    def write(self, kind: str, **fields: Any) -> None:
        """Buffer one record of ``kind`` until :meth:`flush`: ``fields`` after ``schema_version`` and ``kind``, in the
        line's key order (each kind's keys: docs/spec.md section 6; tests/record/schema.py)."""
        if self._fd is not None:
            self._lines.append(compact_json({"schema_version": SCHEMA_VERSION, "kind": kind, **fields}))

    def append_line(self, line: str) -> None:
        """Buffer one record already encoded as its JSON line (:class:`ColumnLines`)."""
        if self._fd is not None:
            self._lines.append(line)

    def write_now(self, kind: str, **fields: Any) -> bool:
        """:meth:`write` as one whole line with one ``write``, now (any thread: no lock, no buffer; ``O_APPEND``
        places it after whatever is in the file): the heartbeat's. Returns whether it was written."""
        if (fd := self._fd) is None:
            return False
        try:
            data = (compact_json({"schema_version": SCHEMA_VERSION, "kind": kind, **fields}) + "\n").encode("utf-8")
            return _write_bytes(fd, data) == len(data)
        except (OSError, ValueError, TypeError):
            return False

    def flush(self) -> None:
        """Append the buffered records as whole lines (``OSError``: cut back to the last whole line, buffer dropped)."""
        if self._fd is None or not self._lines:
            return
        data = ("\n".join(self._lines) + "\n").encode("utf-8")
        self._lines.clear()
        with contextlib.suppress(OSError):  # the file's end now: a heartbeat line of another thread counts (write_now)
            self._size = os.fstat(self._fd).st_size
        try:
            _write_all(self._fd, data)
        except OSError:
            with contextlib.suppress(OSError):  # whatever reached the file, it ends at the last whole line again
                os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)

    def abandon(self) -> None:
        """In a forked child: close this process's copy of the descriptor, writing nothing; later writes are ignored."""
        fd, self._fd = self._fd, None
        self._lines.clear()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Flush and close (``OSError`` when the last flush fails; closed anyway); later writes are ignored."""
        try:
            self.flush()
        finally:
            self.abandon()


def _write_bytes(fd: int, data: bytes) -> int:
    """``os.write``; the seam tests replace to fail like a full disk."""
    return os.write(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    written = 0
    while written < len(data):
        if (n := _write_bytes(fd, data[written:])) <= 0:
            raise OSError(errno.ENOSPC, "no bytes written")
        written += n


def write_file_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` by a temporary file and a rename (``OSError``: ``path`` as it was, no temporary)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


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
        head = compact_json({"schema_version": SCHEMA_VERSION, "kind": kind, "name": series.name, "x": series.x_kind})
        return f'{head[:-1]},"step":[{step_json}],"t_us":[{us_json}],"value":[{value_json}]}}', entry[1]
