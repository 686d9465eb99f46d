"""The runs table as plain text of runs a test already loaded (record/runs_table.py's rows, no run root read)."""

from __future__ import annotations

from typing import Any

from trainmeter.record.runs_table import RunsTable, run_row


def format_runs(found: list[Any]) -> str:
    """The runs table (plain text) of already loaded runs (:class:`~trainmeter.record.runs.Run`), in the order given."""
    return RunsTable(rows=tuple(run_row(r.dir) for r in found), more=0, root="").text() if found else "no saved runs"
