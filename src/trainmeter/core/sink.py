"""The seam between the run state and the saved record (``trainmeter.record.recorder.RunRecorder``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class RecordSink(Protocol):
    """The saved record of one run; ``run``: its RunContext (a steady report's: its snapshot). Training thread."""

    def open(self, run: Any, started_at: str) -> Path | None:
        """Make the run folder, open the run log and write its ``start`` record; the folder, or ``None`` when it
        cannot be made now (warned). Never raises for a disk fault."""

    def write_interval(self, run: Any, elapsed_s: float, phases_s: dict[str, float],
                       extra: dict[str, Any]) -> None:
        """Write the columns since the last report and one ``interval`` record, then flush."""

    def text_line(self, run: Any) -> str:
        """The text line of the last report (docs/spec.md section 7)."""

    def closing_line(self, run: Any) -> str:
        """One closing line naming the run folder."""

    def write_passport(self, run: Any) -> None:
        """Write passport.json and passport.md and the log's ``end`` record."""

    def close(self) -> None:
        """Close the run log (idempotent)."""
