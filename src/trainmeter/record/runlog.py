"""The run log: an append-only ``events.jsonl`` with ``schema_version`` on each line.

Flushed at every report, so a killed kernel leaves a readable log up to the
last interval. Written from the training thread only (not thread-safe).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1


def clean(value: Any) -> Any:
    """Return ``value`` with non-finite floats replaced by ``None`` (JSON-safe)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


class RunLog:
    """Writes one JSON object per line to ``<run dir>/events.jsonl``.

    Args:
        path: The file to append to (created with its folder).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        """Append one record of ``kind`` (buffered until :meth:`flush`)."""
        if self._file is None:
            return
        record = {"schema_version": SCHEMA_VERSION, "kind": kind, **fields}
        try:  # fast path: the C encoder, refusing NaN and inf
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except ValueError:
            line = json.dumps(clean(record), separators=(",", ":"))
        self._file.write(line + "\n")

    def flush(self) -> None:
        """Flush buffered records to disk."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close; later writes are ignored."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[dict[str, Any]]:
    """Return the records of an ``events.jsonl``; a torn last line is skipped."""
    records = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
