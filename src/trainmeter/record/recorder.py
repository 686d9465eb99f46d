"""The record sink of a run: run folder, run log, text line, passport.

Implements :class:`trainmeter.core.sink.RecordSink`. Training thread only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainmeter.record.reporter import format_text, summary_line, write_interval
from trainmeter.record.runlog import RunLog
from trainmeter.record.runs import make_run_dir
from trainmeter.record.view import RunView


def _rank_seat(root: Path, name: str, now: Any) -> Any:
    """This process's seat when it is a rank of a launch (trainmeter.ranks), else ``None``; never raises."""
    try:
        from trainmeter.ranks.seating import seat_for

        return seat_for(root, name, now)
    except Exception:
        return None


class RunRecorder:
    """Writes ``<run root>/<UTC>-<name>/events.jsonl`` at each report and the passport at the end."""

    def __init__(self) -> None:
        self._log: RunLog | None = None
        self._cursor: dict[str, int] = {}
        self._seat: Any = None

    def open(self, run: RunView, started_at: str) -> Path:
        """Make the run folder, open the run log, write ``start`` and register the log as a series reader."""
        from datetime import datetime

        from trainmeter.record.environment import describe_environment

        now = datetime.fromisoformat(started_at)
        seat = _rank_seat(Path(run.options.run_root), run.options.name, now)
        run_dir = seat.dir if seat is not None else make_run_dir(Path(run.options.run_root), run.options.name, now)
        self._seat = seat
        self._log = RunLog(run_dir / "events.jsonl")
        self._log.write("start", name=run.options.name, started_at=started_at,
                        options=run.options.to_dict(), environment=describe_environment())
        if seat is not None:  # one rank of a launch: say which, in its own log
            self._log.write("rank", launch_dir=str(seat.launch_dir), pid=os.getpid(), **seat.identity.to_dict())
        self._log.flush()
        self._cursor = run.add_reader()
        return run_dir

    def write_interval(self, run: RunView, elapsed_s: float, phases_s: dict[str, float],
                       extra: dict[str, Any]) -> None:
        """Write the columns since the last report and one ``interval`` record, then flush."""
        if self._log is not None:
            write_interval(run, self._log, self._cursor, elapsed_s, phases_s, extra)

    def text_line(self, run: RunView) -> str:
        """The text line of the last report."""
        return format_text(run)

    def closing_line(self, run: RunView) -> str:
        """One closing line naming the run folder."""
        return summary_line(run)

    def write_passport(self, run: RunView) -> None:
        """passport.json + passport.md, then the log's ``end`` record."""
        from trainmeter.record.passport import write_passport

        if run.run_dir is not None:
            write_passport(run)
        if self._log is not None:
            self._log.write("end", status=run.status, ended_at=run.ended_at, error=run.error)
            self._log.flush()
        if self._seat is not None:  # the last rank to finish merges the launch's passport
            from trainmeter.ranks.merge import after_rank_finished

            after_rank_finished(self._seat)

    def close(self) -> None:
        """Close the run log."""
        if self._log is not None:
            self._log.close()
