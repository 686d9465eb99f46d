"""The run log's records and reader (docs/spec.md section 6): bounded reads (the writer is :mod:`~.runlog`).

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


LOG_FILE = "events.jsonl"
PASSPORT_FILE = "passport.json"
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 256 * 1024
BLOCK_BYTES = 16 * 1024  # bytes read per call by head and tail when they may stop early (n records)


@dataclass(slots=True)
class ReadStats:
    """What a read took: bytes read from the file and lines that were not records (skipped)."""

    bytes_read: int = 0  # from the file, in all
    lines_skipped: int = 0  # non-blank lines that were not a JSON object (damaged), the torn last line apart
    torn_last_line: bool = False  # the file ends in a line with no newline that is not a record (killed mid-write)
    bytes_left_out: int = 0  # past the read's ``max_bytes`` bound, not read


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


def _take(line: bytes, kinds: Collection[str] | None, needles: tuple[bytes, ...], stats: ReadStats | None,
          torn: bool = False) -> Record | None:
    """The record of ``kinds`` on ``line``; a ``torn`` last line that is no record counts as torn, not skipped."""
    if kinds is not None and not torn and not any(n in line for n in needles):  # a cheap byte test before parsing
        return None
    record = parse_line(line, None if torn else stats)
    if torn and record is None and stats is not None and line.strip():
        stats.torn_last_line = True
    return record if record is not None and (kinds is None or record.get("kind") in kinds) else None


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
            if (record := _take(line, kinds, needles, stats, not whole)) is not None:  # only the last is torn
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
                if (record := _take(line, kinds, needles, stats, torn)) is not None:
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
    """The last record of each of ``kinds`` within the last ``max_bytes`` of ``path``, read backwards (never raises)."""
    found: dict[str, Record] = {}
    for record in _backwards(path, max_bytes, kinds, stats, BLOCK_BYTES):
        found.setdefault(str(record.get("kind")), record)
        if len(found) == len(kinds):
            break
    return found
