"""dashboard.json: written at every run's end, without loading the live widget's modules for a headless run."""

from __future__ import annotations

import json
import subprocess
import sys

from trainmeter.widget.view_model import DASHBOARD_FILE, save_dashboard

_HEADLESS_RUN = """
import sys, tempfile
import trainmeter as tm
with tm.monitor(name="headless", run_dir=tempfile.mkdtemp(), interval_s=3600) as m:
    for step in range(1, 51):
        tm.emit(train_loss=1.0 / step, step=step)
print(m.run_dir)
print(sorted(n for n in {mods} if n in sys.modules))
"""


def headless_run(modules: tuple[str, ...]) -> tuple[str, list[str]]:
    """Run a headless monitored run in a fresh interpreter; return its folder and which of ``modules`` it loaded."""
    out = subprocess.run([sys.executable, "-c", _HEADLESS_RUN.format(mods=modules)], capture_output=True,
                         text=True, check=True, timeout=120).stdout.splitlines()
    return out[-2], eval(out[-1])  # noqa: S307  (our own child's printed list)


def test_the_file_drops_the_absolute_run_paths(tmp_path) -> None:
    save_dashboard(tmp_path, {"name": "x", "run_dir": "/home/someone/run", "run_path": "/a", "run_rel": "b"})
    assert json.loads((tmp_path / DASHBOARD_FILE).read_text()) == {"name": "x"}


def test_a_headless_run_writes_it_without_loading_the_publisher_or_snapshot() -> None:
    run_dir, loaded = headless_run(("trainmeter.widget.publisher", "trainmeter.widget.snapshot",
                                    "trainmeter.widget.attach"))
    assert loaded == []
    state = json.loads(open(f"{run_dir}/{DASHBOARD_FILE}").read())
    assert state["look"]["palette"] and "run_dir" not in state
