"""Issue 40 item 7: a kill between the passport's files is seen on read, never read as a completed run.

The record's end is written passport.md, dashboard.json, the log's end record, then passport.json last with the
files it found (docs/spec.md section 6). A child process SIGKILLs itself just before each file is written; the
run then reads as unfinished or ``damaged`` naming the missing file in ``tm.load`` and ``%trainmeter runs``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trainmeter as tm
from trainmeter.record.runs import runs_table

_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {src!r})
    from trainmeter.api import run_monitored
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options
    from trainmeter.record import passport, runlog
    from trainmeter.widget import view_model

    def killing(write):
        def before(path, text):
            if path.name == {kill_before!r}:
                os.kill(os.getpid(), signal.SIGKILL)  # a real kill between the record's files
            return write(path, text)
        return before

    passport.write_file_atomic = killing(runlog.write_file_atomic)
    view_model.write_file_atomic = killing(runlog.write_file_atomic)
    m = make_monitor(make_options(run_dir={root!r}, name="killed", widget=False), text=False, probes=False)
    with run_monitored(m):  # no torch imported: the child starts in a second
        for _ in range(3):
            m.on_step(10)
""")


def _killed_before(tmp_path: Path, names: list[str]) -> dict[str, Path]:
    """One child per name, each killed just before writing that file; their run folders."""
    src = str(Path(__file__).parents[2] / "src")
    procs = {name: subprocess.Popen([sys.executable, "-c", _SCRIPT.format(src=src, kill_before=name,
                                                                           root=str(tmp_path / name))],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": ""})
             for name in names}
    folders = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        (folders[name],) = [p for p in (tmp_path / name).iterdir() if p.is_dir()]
    return folders


def test_a_kill_between_the_passports_files_never_reads_as_completed(tmp_path):
    folders = _killed_before(tmp_path, ["passport.md", "dashboard.json", "passport.json"])
    for name, folder in folders.items():
        assert not (folder / "passport.json").exists()
        run = tm.load(folder)
        (row,) = runs_table(tmp_path / name).rows
        assert run.status != "completed" and "completed" not in row.status, name
    # the end record written, the passport not: the run says the passport is missing
    ended = folders["passport.json"]
    assert (ended / "passport.md").exists() and (ended / "dashboard.json").exists()
    assert tm.load(ended).status == "damaged" and tm.load(ended).damaged == "incomplete: passport.json missing"
    assert runs_table(tmp_path / "passport.json").rows[0].status == "damaged: incomplete: passport.json missing"
    # killed before the end record: an unfinished run, as a killed kernel's
    assert tm.load(folders["dashboard.json"]).status == "unfinished"


@pytest.mark.parametrize("lost", ["passport.md", "dashboard.json", "events.jsonl"])
def test_a_passport_lists_its_files_and_a_run_missing_one_says_which(tmp_path, lost):
    from tests.conftest import tiny_model_and_data, train_steps

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=tmp_path, name="whole") as m:
        train_steps(model, opt, batches[:3])
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["files"] == ["events.jsonl", "curves.json", "passport.md", "dashboard.json"]
    assert tm.load(m.run_dir).status == "completed" and tm.load(m.run_dir).damaged is None
    (m.run_dir / lost).unlink()
    assert tm.load(m.run_dir).damaged == f"incomplete: {lost} missing"
    assert runs_table(tmp_path).rows[0].status == f"damaged: incomplete: {lost} missing"
