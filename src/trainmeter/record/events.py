"""The run log's records and reader (docs/spec.md section 6): the writer's constructors, and bounded reads.

Every reader, in any wing, reads the log through :func:`iter_events`, :func:`head`, :func:`tail`,
:func:`last_of_kinds` or :func:`parse_line`, every file opened through :mod:`trainmeter.record.safe_read`. The one
tolerance rule: a line is a record when it decodes as UTF-8 and parses as a JSON object holding only text a UTF-8 sink
can write; any other line (torn, cut by a read window, damaged) is skipped and counted in :class:`ReadStats`, never
raised. Pure; a :class:`ReadStats` is its caller's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from trainmeter.record.safe_read import has_lone_surrogate, iter_lines, open_regular

SCHEMA_VERSION = 1


Record = dict[str, Any]
"""One record of the log (its keys per kind: docs/spec.md section 6; tests/record/schema.py)."""


# the writer's constructors (field order is the line's key order)

def _record(kind: str, **fields: Any) -> Record:
    return {"schema_version": SCHEMA_VERSION, "kind": kind, **fields}


def start_record(*, name: str, started_at: str, options: dict[str, Any], environment: dict[str, Any]) -> Record:
    """The ``start`` record: the run's name, start and options (``options.run_root`` relative)."""
    return _record("start", name=name, started_at=started_at, options=options, environment=environment)


def rank_record(*, launch_dir: str, pid: int, device: str | None, identity: dict[str, Any]) -> Record:
    """The ``rank`` record of one rank's log (``identity``: ``RankIdentity.to_dict()``)."""
    return _record("rank", launch_dir=launch_dir, pid=pid, device=device, **identity)


def columns_record(kind: str, *, name: str, x: str, step: list[int], t_us: list[int], value: list[Any]) -> Record:
    """A ``steps`` or ``series`` record (``kind``); ``x`` is ``step`` or ``time``; ``t_us``: session microseconds."""
    return _record(kind, name=name, x=x, step=step, t_us=t_us, value=value)


def interval_record(*, step: int, tokens: int, token_unit: str, elapsed_s: float, phases_s: dict[str, float],
                    throughput: dict[str, Any], memory: dict[str, Any] | None, sections: dict[str, Any]) -> Record:
    """The ``interval`` record; ``sections`` are the wings' fields, by extension name."""
    return _record("interval", step=step, tokens=tokens, token_unit=token_unit, elapsed_s=elapsed_s,
                   phases_s=phases_s, throughput=throughput, memory=memory, **sections)


def gap_record(*, from_step: int, to_step: int | None, failed_writes: int, dropped_points: int, error: str) -> Record:
    """The ``gap`` record: a closed span the log could not be written, written once writes work again."""
    return _record("gap", from_step=from_step, to_step=to_step, failed_writes=failed_writes,
                   dropped_points=dropped_points, error=error)


def heartbeat_record(*, step: int, steps_done: int, step_running_s: float, phase: str, elapsed_s: float,
                     since_report_s: float) -> Record:
    """The ``heartbeat`` record (docs/spec.md section 18); ``phase``: the open ``tm.phase``, else ``train``."""
    return _record("heartbeat", step=step, steps_done=steps_done, step_running_s=step_running_s,
                   phase=phase, elapsed_s=elapsed_s, since_report_s=since_report_s)


def checkpoint_record(entry: dict[str, Any], renamed_from: str | None = None) -> Record:
    """The ``checkpoint`` record of one passport ``checkpoints`` entry (its ``step``, ``path``, ``bytes``, ``source``);
    ``renamed_from``: the path of the record it replaces (a temp file renamed to its final name)."""
    fields = {k: entry.get(k) for k in ("step", "path", "bytes", "source")}
    return _record("checkpoint", **fields, **({"renamed_from": renamed_from} if renamed_from is not None else {}))


def end_record(*, status: str, ended_at: str | None, error: str | None) -> Record:
    """The ``end`` record: the last of a finished run."""
    return _record("end", status=status, ended_at=ended_at, error=error)


LOG_FILE = "events.jsonl"
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 256 * 1024
BLOCK_BYTES = 16 * 1024  # bytes read per call by head and tail when they may stop early (n records)

KINDS: tuple[str, ...] = ("start", "rank", "steps", "series", "interval", "gap", "checkpoint", "end")


@dataclass(slots=True)
class ReadStats:
    """What a read took: bytes read from the file and lines that were not records (skipped).

    Attributes:
        bytes_read: Bytes read from the file, in all.
        lines_skipped: Non-blank lines that were not a JSON object (damaged), the torn last line apart.
        torn_last_line: The file ends in a line with no newline that is not a record (killed mid-write).
        bytes_left_out: Bytes past the read's ``max_bytes`` bound, not read.
    """

    bytes_read: int = 0
    lines_skipped: int = 0
    torn_last_line: bool = False
    bytes_left_out: int = 0


def parse_line(line: bytes | str, stats: ReadStats | None = None) -> Record | None:
    """The record on one line, or ``None`` (blank, torn, damaged or not a JSON object; counted as skipped)."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, nested too deep
        record = None
    if isinstance(record, dict) and not has_lone_surrogate(line, record):
        return record  # type: ignore[return-value]
    if stats is not None:
        stats.lines_skipped += 1
    return None


def _needles(kinds: Collection[str] | None) -> tuple[bytes, ...]:
    return tuple(f'"{k}"'.encode() for k in kinds) if kinds is not None else ()


def _take(line: bytes, kinds: Collection[str] | None, needles: tuple[bytes, ...],
          stats: ReadStats | None) -> Record | None:
    if kinds is not None and not any(n in line for n in needles):  # a cheap byte test before parsing
        return None
    record = parse_line(line, stats)
    return record if record is not None and (kinds is None or record.get("kind") in kinds) else None


def _take_last(line: bytes, torn: bool, kinds: Collection[str] | None, needles: tuple[bytes, ...],
               stats: ReadStats | None) -> Record | None:
    """:func:`_take`, where a ``torn`` last line that is no record counts as ``torn_last_line``, not as skipped."""
    record = _take(line, kinds, needles, None if torn else stats)
    if torn and record is None and stats is not None and line.strip() and parse_line(line) is None:
        stats.torn_last_line = True
    return record


def iter_events(path: Path, *, kinds: Collection[str] | None = None, stats: ReadStats | None = None,
                max_bytes: int | None = None) -> Iterator[Record]:
    """Every record of the log at ``path``, in order (``kinds``: only those; other lines are not parsed), read a block
    at a time, a line over its bound skipped as damaged; ``max_bytes`` stops the read there (the bytes past it counted
    in ``stats.bytes_left_out``). ``OSError`` when the file cannot be opened (a missing log is the caller's to say)
    or is not a regular file (:class:`~trainmeter.record.safe_read.Damaged`)."""
    needles = _needles(kinds)
    with open_regular(path) as f:
        if max_bytes is not None and stats is not None:
            stats.bytes_left_out = max(0, os.fstat(f.fileno()).st_size - max_bytes)
        for line, whole in iter_lines(f, max_bytes=max_bytes):
            if stats is not None:
                stats.bytes_read += len(line)
            if (record := _take_last(line, not whole, kinds, needles, stats)) is not None:  # only the last is torn
                yield record


def read_events(path: Path, *, kinds: Collection[str] | None = None, stats: ReadStats | None = None,
                max_bytes: int | None = None) -> list[Record]:
    """The records of the log at ``path`` as a list (see :func:`iter_events`; ``OSError`` when it cannot be opened)."""
    return list(iter_events(path, kinds=kinds, stats=stats, max_bytes=max_bytes))


def head(path: Path, n: int | None = None, *, max_bytes: int = HEAD_BYTES, kinds: Collection[str] | None = None,
         stats: ReadStats | None = None) -> list[Record]:
    """The records on the whole lines within the first ``max_bytes`` of ``path`` (at most ``n``, reading stops once
    ``n`` records of ``kinds`` are found; never raises). The piece after the window's last newline is left out."""
    return list(islice(_forwards(path, max_bytes, kinds, stats, None if n is None else BLOCK_BYTES), n))


def _forwards(path: Path, max_bytes: int, kinds: Collection[str] | None, stats: ReadStats | None,
              block_bytes: int | None) -> Iterator[Record]:
    needles = _needles(kinds)
    with contextlib.suppress(OSError), open_regular(path) as f:
        for line, whole in iter_lines(f, max_bytes=max_bytes, block_bytes=block_bytes):
            if stats is not None:
                stats.bytes_read += len(line)
            if whole and (record := _take(line, kinds, needles, stats)) is not None:
                yield record


def _backwards(path: Path, max_bytes: int, kinds: Collection[str] | None, stats: ReadStats | None,
               block_bytes: int | None) -> Iterator[Record]:
    """The records within the last ``max_bytes`` of ``path``, newest first, read ``block_bytes`` at a time."""
    needles = _needles(kinds)
    with contextlib.suppress(OSError), open_regular(path) as f:
        end = os.fstat(f.fileno()).st_size
        low, rest, newest = max(0, end - max_bytes), b"", True
        while end > low:
            start = low if block_bytes is None else max(low, end - block_bytes)
            f.seek(start)
            chunk = f.read(end - start)
            if stats is not None:
                stats.bytes_read += len(chunk)
            end = start
            lines = (chunk + rest).split(b"\n")
            rest = lines[0]  # may go on in the bytes before this block
            for line in reversed(lines[1:]):
                torn, newest = newest, False  # the piece after the last newline: a torn last line if any
                if (record := _take_last(line, torn, kinds, needles, stats)) is not None:
                    yield record
        if low == 0:  # the file's first line, whole
            if (record := _take(rest, kinds, needles, stats)) is not None:
                yield record


def tail(path: Path, n: int | None = None, *, max_bytes: int = TAIL_BYTES, kinds: Collection[str] | None = None,
         stats: ReadStats | None = None) -> list[Record]:
    """The records on the whole lines within the last ``max_bytes`` of ``path``, oldest first (never raises); the
    window's first line is left out when the file is longer (it may be cut). With ``n``, only the last ``n`` records
    (of ``kinds``), and reading (backwards, :data:`BLOCK_BYTES` at a time) stops once they are found."""
    return list(islice(_backwards(path, max_bytes, kinds, stats, None if n is None else BLOCK_BYTES), n))[::-1]


def last_of_kinds(path: Path, kinds: Collection[str], *, max_bytes: int = TAIL_BYTES,
                  stats: ReadStats | None = None) -> dict[str, Record]:
    """The last record of each of ``kinds`` within the last ``max_bytes`` of ``path`` (never raises); reads backwards
    :data:`BLOCK_BYTES` at a time and stops once each kind is found."""
    found: dict[str, Record] = {}
    for record in _backwards(path, max_bytes, kinds, stats, BLOCK_BYTES):
        kind = str(record.get("kind"))
        if kind not in found:
            found[kind] = record
            if len(found) == len(kinds):
                break
    return found
