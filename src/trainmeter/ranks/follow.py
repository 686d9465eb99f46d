"""Follow a run another process is writing: bounded tail reads of its ``events.jsonl`` files (docs/spec.md section 19).

One thread at a time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmeter.ranks.seating import seats
from trainmeter.record.events import LOG_FILE, Record, parse_line
from trainmeter.record.safe_read import open_regular

MAX_READ_BYTES = 256 * 1024


class TailReader:
    """Reads the complete lines appended to ``path`` (maybe not there yet) since the last call, at most ``max_bytes``
    a call (a torn last line waits for its end; a longer line is skipped)."""

    def __init__(self, path: Path, max_bytes: int = MAX_READ_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.offset = 0
        self.bytes_read = 0
        self._partial = b""
        self._skipping = False

    def read(self) -> list[Record]:
        """Parse and return the complete records appended since the last call (never raises)."""
        try:
            with open_regular(self.path) as f:  # a FIFO or a device is never followed
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated or replaced: start over
                    self.offset, self._partial, self._skipping = 0, b"", False
                f.seek(self.offset)
                chunk = f.read(self.max_bytes)
        except OSError:
            return []
        self.offset += len(chunk)
        self.bytes_read += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.max_bytes:  # one line longer than a read: skip it to its end
            self._partial, self._skipping = b"", True
        if self._skipping and lines:  # the first line is the end of the one skipped
            self._skipping = False
            lines = lines[1:]
        return [record for record in map(parse_line, lines) if record is not None]


@dataclass(slots=True)
class SourceState:
    """What a follower knows of one log: ``seat`` ``""`` for the run's own, else the seat folder; the ``rank``
    record's fields; the last step and tokens; ``running`` or the ``end`` record's status; the latest ``interval``;
    ``updated_s``, when (``time.time()``) the log last grew."""

    seat: str
    rank: int | None = None
    node: str | None = None
    pid: int | None = None
    world_size: int | None = None
    steps: int = 0
    tokens: int = 0
    status: str = "running"
    interval: dict[str, Any] = field(default_factory=dict)
    updated_s: float = 0.0

    @property
    def label(self) -> str:
        """``rank 1``, or the seat name for a child with no rank."""
        return f"rank {self.rank}" if self.rank is not None else self.seat


class RunFollower:
    """Follows a run folder's own log and each seat's (``max_bytes`` a file a :meth:`poll`): their latest figures."""

    def __init__(self, run_dir: Path, max_bytes: int = MAX_READ_BYTES) -> None:
        self.run_dir = Path(run_dir)
        self.max_bytes = max_bytes
        self._readers: dict[str, TailReader] = {}
        self.sources: dict[str, SourceState] = {}

    def poll(self, on_record: Callable[[str, Record], None] | None = None) -> dict[str, SourceState]:
        """Read what was appended since the last poll, each record also to ``on_record(seat, record)``; return the
        state of every source (the run's own log, ``""``, and each seat's, found as they appear)."""
        for seat, folder in (("", self.run_dir), *((p.name, p) for p in seats(self.run_dir))):
            if seat not in self._readers and (folder / LOG_FILE).exists():
                self._readers[seat] = TailReader(folder / LOG_FILE, self.max_bytes)
                self.sources[seat] = SourceState(seat=seat)
        now = time.time()
        for seat, reader in self._readers.items():
            records = reader.read()
            if records:
                self.sources[seat].updated_s = now
            for record in records:
                apply_record(self.sources[seat], record)
                if on_record is not None:
                    on_record(seat, record)
        return self.sources

    def ranks(self) -> list[SourceState]:
        return sorted((s for k, s in self.sources.items() if k), key=rank_order)


def rank_order(seat: Any) -> tuple[bool, int, str]:
    """The sort key of a seat's state or summary: by rank, seats without one last, by name."""
    return seat.rank is None, seat.rank if seat.rank is not None else 0, seat.seat


def apply_record(state: SourceState, record: Record) -> None:
    kind = record.get("kind")
    if kind == "interval":
        state.interval = record
        state.steps = int(record.get("step") or 0)
        state.tokens = int(record.get("tokens") or 0)
    elif kind == "steps" and (steps := record.get("step")):
        state.steps = max(state.steps, int(steps[-1]))
    elif kind == "rank":
        for key in ("rank", "node", "pid", "world_size"):
            setattr(state, key, record.get(key))
    elif kind == "end":
        state.status = str(record.get("status") or "ended")


def newest_live_run(root: Path, within_s: float = 120.0) -> Path | None:
    """The run folder under ``root`` whose log (or a rank's) grew last, if it grew in the last ``within_s``."""
    try:
        folders = [p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return None
    grown: list[tuple[float, Path]] = []  # (when its log, or a rank's, last grew; the run folder)
    for folder in folders:
        for log in (folder, *seats(folder)):
            with contextlib.suppress(OSError):
                grown.append(((log / LOG_FILE).stat().st_mtime, folder))
    best = max(grown, key=lambda pair: pair[0], default=None)
    return None if best is None or time.time() - best[0] > within_s else best[1]
