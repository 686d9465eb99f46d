"""The run log's writer: an append-only ``events.jsonl``, flushed at every report; the record's JSON helpers.

Training thread only. The records and their reader are :mod:`trainmeter.record.events`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from pathlib import Path
from typing import Any

from trainmeter.record.events import SCHEMA_VERSION, Record, read_events

__all__ = ["RunLog", "clean", "compact_json", "json_lines", "read_events", "write_file_atomic"]

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
        self.append({"schema_version": SCHEMA_VERSION, "kind": kind, **fields})

    def append(self, record: Record) -> None:
        """Buffer one whole record until :meth:`flush`."""
        if self._fd is not None:
            self._lines.append(compact_json(record))

    def append_line(self, line: str) -> None:
        """Buffer one record already encoded as its JSON line (:mod:`~trainmeter.record.column_lines`)."""
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

    def discard(self) -> None:
        """Drop the buffered records."""
        self._lines.clear()

    def abandon(self) -> None:
        """In a forked child: close this process's copy of the descriptor, writing nothing; later writes are ignored."""
        fd, self._fd = self._fd, None
        self._lines.clear()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Flush and close (``OSError`` when the last flush fails; closed anyway); later writes are ignored."""
        if self._fd is None:
            return
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
    """Write ``text`` to ``path`` through a temporary file and a rename; a failure (``OSError``: a full disk) leaves
    ``path`` as it was and no temporary file."""
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
