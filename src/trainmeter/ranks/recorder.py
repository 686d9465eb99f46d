"""A record sink that takes its seat only at the first report after a step (a forked or autostarted child's): a
process that never steps leaves no trace. Training thread only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class LazyRankRecorder:
    """Defers :meth:`open` of ``inner`` to the first report with a step (RecordSink)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._open = False
        self._started_at: str | None = None

    @property
    def seated(self) -> bool:
        """Whether the run took its seat (wrote anything)."""
        return self._open

    def open(self, run: Any, started_at: str) -> Path | None:  # type: ignore[override]
        """Remember the start; make nothing yet (the run's ``run_dir`` stays ``None``)."""
        self._started_at = started_at
        return None

    def _seat(self, run: Any) -> bool:
        if not self._open and run.steps > 0:
            self._open = True
            run.set_run_dir(self._inner.open(run, self._started_at or run.started_at))
        return self._open

    def write_interval(self, run: Any, elapsed_s: float, phases_s: dict[str, float], extra: dict[str, Any]) -> None:
        """Seat on the first report after a step, then write like the ordinary record."""
        if self._seat(run):
            self._inner.write_interval(run, elapsed_s, phases_s, extra)

    def text_line(self, run: Any) -> str:
        """The text line (computed even when nothing is written)."""
        return self._inner.text_line(run)

    def closing_line(self, run: Any) -> str:
        """The closing line, or an empty one when the run never took a seat."""
        return self._inner.closing_line(run) if self._open else ""

    def write_passport(self, run: Any) -> None:
        """The rank's passport, when it took a seat."""
        if self._seat(run):
            self._inner.write_passport(run)

    def abandon_in_child(self) -> None:
        """In a forked child: let go of the parent's run log without writing to it."""
        self._inner.abandon_in_child()

    def close(self) -> None:
        """Close the run log, if opened."""
        if self._open:
            self._inner.close()
