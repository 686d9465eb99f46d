"""The run log's schema and reader: its records (from record/event_records.py) and bounded reads.

This module is the record wing's published view of the run log (docs/spec.md section 6): the
writer (:mod:`trainmeter.record.runlog`, :mod:`trainmeter.record.recorder`,
:mod:`trainmeter.record.reporter`) builds its records with the constructors here, and every
reader, in any wing, reads the log through :func:`iter_events`, :func:`head`, :func:`tail`,
:func:`last_of_kinds` or :func:`parse_line` (the follower of a growing log,
:class:`trainmeter.ranks.follow.TailReader`) and types what it gets with the records here. The
record wing is a sink; other wings import it for the run log through this module.

Every file is opened through :mod:`trainmeter.record.safe_read` (a FIFO, a device or a symlink out
of the run folder is refused).

The one tolerance rule, for every reader: a line is a record when it decodes as UTF-8 and parses
as a JSON object holding only text a UTF-8 sink can write (no lone ``\\udXXX`` surrogate escape);
any other line (torn by a kill mid-write, cut by a read window, damaged bytes) is skipped and
counted in :class:`ReadStats`, never raised. A damaged log reads as the records it still holds.
:func:`iter_events` raises ``OSError`` only when the file cannot be opened; :func:`head` and
:func:`tail` read an unreadable file as empty.

Pure functions over a file; a :class:`ReadStats` belongs to the one caller that passed it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainmeter.record.event_records import (  # the records and constructors: part of this view
    SCHEMA_VERSION as SCHEMA_VERSION,
    StartRecord as StartRecord,
    RankRecord as RankRecord,
    ColumnsRecord as ColumnsRecord,
    Throughput as Throughput,
    IntervalRecord as IntervalRecord,
    GapRecord as GapRecord,
    HeartbeatRecord as HeartbeatRecord,
    EndRecord as EndRecord,
    Record as Record,
    start_record as start_record,
    rank_record as rank_record,
    columns_record as columns_record,
    interval_record as interval_record,
    gap_record as gap_record,
    heartbeat_record as heartbeat_record,
    end_record as end_record,
)
from trainmeter.record.safe_read import has_lone_surrogate, iter_lines, open_regular

LOG_FILE = "events.jsonl"
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 256 * 1024
BLOCK_BYTES = 16 * 1024
"""Bytes read per call by :func:`head` and :func:`tail` when they may stop early (``n`` records)."""

KINDS: tuple[str, ...] = ("start", "rank", "steps", "series", "interval", "gap", "end")

# --- the one tolerance rule ------------------------------------------------------------------------

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


def _wanted(line: bytes, kinds: Collection[str] | None, needles: tuple[bytes, ...]) -> bool:
    """Whether a line may hold one of ``kinds``: a cheap byte test before parsing (the kind is checked after)."""
    return kinds is None or any(n in line for n in needles)


def _needles(kinds: Collection[str] | None) -> tuple[bytes, ...]:
    return tuple(f'"{k}"'.encode() for k in kinds) if kinds is not None else ()


def _take(line: bytes, kinds: Collection[str] | None, needles: tuple[bytes, ...],
          stats: ReadStats | None) -> Record | None:
    if not _wanted(line, kinds, needles):
        return None
    record = parse_line(line, stats)
    if record is None or (kinds is not None and record.get("kind") not in kinds):
        return None
    return record


# --- readers ---------------------------------------------------------------------------------------

def iter_events(path: Path, *, kinds: Collection[str] | None = None, stats: ReadStats | None = None,
                max_bytes: int | None = None) -> Iterator[Record]:
    """Every record of the log at ``path``, in order (``kinds``: only those; other lines are not parsed).

    Opened through :mod:`trainmeter.record.safe_read` (regular files only) and read a block at a
    time, a line over its bound skipped as damaged; ``max_bytes`` stops the read there (the bytes
    past it are counted in ``stats.bytes_left_out``).

    Raises:
        OSError: When the file cannot be opened (a missing log is the caller's to say), or is not a
            regular file (:class:`~trainmeter.record.safe_read.Damaged`).
    """
    needles = _needles(kinds)
    with open_regular(path) as f:
        if max_bytes is not None and stats is not None:
            stats.bytes_left_out = max(0, os.fstat(f.fileno()).st_size - max_bytes)
        for line, whole in iter_lines(f, max_bytes=max_bytes):
            torn = not whole  # only the last line can be
            if stats is not None:
                stats.bytes_read += len(line)
            record = _take(line, kinds, needles, None if torn else stats)
            if torn and record is None and stats is not None and line.strip() and parse_line(line) is None:
                stats.torn_last_line = True
            if record is not None:
                yield record


def read_events(path: Path, *, kinds: Collection[str] | None = None, stats: ReadStats | None = None,
                max_bytes: int | None = None) -> list[Record]:
    """The records of the log at ``path`` as a list (see :func:`iter_events`).

    Raises:
        OSError: When the file cannot be opened.
    """
    return list(iter_events(path, kinds=kinds, stats=stats, max_bytes=max_bytes))


def head(path: Path, n: int | None = None, *, max_bytes: int = HEAD_BYTES, kinds: Collection[str] | None = None,
         stats: ReadStats | None = None) -> list[Record]:
    """The records on the whole lines within the first ``max_bytes`` of ``path`` (at most ``n``; never raises).

    The piece after the window's last newline is left out (a line the window cut, or a torn last
    line). With ``n``, reading stops once ``n`` records (of ``kinds``) are found.
    """
    needles = _needles(kinds)
    out: list[Record] = []
    try:
        with open_regular(path) as f:
            rest = b""
            left = max_bytes
            while left > 0:
                chunk = f.read(left if n is None else min(left, BLOCK_BYTES))
                if not chunk:
                    break
                left -= len(chunk)
                if stats is not None:
                    stats.bytes_read += len(chunk)
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    record = _take(line, kinds, needles, stats)
                    if record is not None:
                        out.append(record)
                        if n is not None and len(out) >= n:
                            return out
    except OSError:
        return out
    return out


def _backwards(path: Path, max_bytes: int, kinds: Collection[str] | None, stats: ReadStats | None,
               block_bytes: int | None) -> Iterator[Record]:
    """The records within the last ``max_bytes`` of ``path``, newest first, read ``block_bytes`` at a time."""
    needles = _needles(kinds)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            low = max(0, size - max_bytes)
            end = size
            rest = b""
            newest = True
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
                    record = _take(line, kinds, needles, None if torn else stats)
                    if torn and record is None and stats is not None and line.strip() and parse_line(line) is None:
                        stats.torn_last_line = True
                    if record is not None:
                        yield record
            if low == 0:  # the file's first line, whole
                record = _take(rest, kinds, needles, stats)
                if record is not None:
                    yield record
    except OSError:
        return


def tail(path: Path, n: int | None = None, *, max_bytes: int = TAIL_BYTES, kinds: Collection[str] | None = None,
         stats: ReadStats | None = None) -> list[Record]:
    """The records on the whole lines within the last ``max_bytes`` of ``path``, oldest first (never raises).

    When the file is longer than the window, the window's first line is left out (it may be cut).
    With ``n``, only the last ``n`` records (of ``kinds``) are returned and reading (backwards,
    :data:`BLOCK_BYTES` at a time) stops once they are found.
    """
    found: list[Record] = []
    for record in _backwards(path, max_bytes, kinds, stats, None if n is None else BLOCK_BYTES):
        found.append(record)
        if n is not None and len(found) >= n:
            break
    return found[::-1]


def last_of_kinds(path: Path, kinds: Collection[str], *, max_bytes: int = TAIL_BYTES,
                  stats: ReadStats | None = None) -> dict[str, Record]:
    """The last record of each of ``kinds`` within the last ``max_bytes`` of ``path`` (never raises).

    Reads backwards :data:`BLOCK_BYTES` at a time and stops once each kind is found.
    """
    found: dict[str, Record] = {}
    for record in _backwards(path, max_bytes, kinds, stats, BLOCK_BYTES):
        kind = str(record.get("kind"))
        if kind not in found:
            found[kind] = record
            if len(found) == len(kinds):
                break
    return found
