"""``dashboard.json``: the final view state that ``tm.display(run)`` replays; its own module so a run without a widget
writes it at the end without loading the live publisher."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path
from typing import Any

from trainmeter.record.runlog import write_file_atomic

DASHBOARD_FILE = "dashboard.json"


def save_dashboard(run_dir: Any, state: dict[str, Any]) -> None:
    """Write the final ``state`` to ``run_dir/dashboard.json`` (the live panels, charts and tiles the passport lacks);
    a failure only loses the replay's extras."""
    if run_dir is None:
        return
    with suppress(Exception):
        # no absolute path in the record (it can hold a user name; docs/spec.md section 18): a replay
        # places the run from where it is read
        kept = {k: v for k, v in state.items() if k not in ("run_dir", "run_path", "run_rel")}
        write_file_atomic(Path(run_dir) / DASHBOARD_FILE, json.dumps(kept, separators=(",", ":")))
