"""Issue 40 item 8(a): a child seats itself only in a run folder its monitored parent marked.

A process whose inherited ``TRAINMETER_RUN_DIR`` names any other folder (``/`` included) trains unrecorded,
writes nothing there and says so in one line on its stderr; a child of a real monitored parent is still seated.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trainmeter as tm

_CHILD = textwrap.dedent("""
    import os, sys
    import trainmeter  # arms the autostart (a child with TRAINMETER_RUN_DIR)
    import torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    print(os.getpid())
""")


def _children(**run_dirs: dict[str, str]) -> dict[str, subprocess.CompletedProcess]:
    """One child per entry, run at once, each with that environment on top of this one's (trainmeter's src first)."""
    src = str(Path(__file__).parents[2] / "src")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMETER_")}
    procs = {key: subprocess.Popen([sys.executable, "-c", _CHILD], text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env={**base, "PYTHONPATH": src, **env})
             for key, env in run_dirs.items()}
    return {key: subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for key, p in procs.items()}


def test_a_child_writes_only_into_the_run_folder_its_monitored_parent_marked(tmp_path):
    with tm.monitor(run_dir=tmp_path / "runs", name="parent") as m:
        done = _children(
            marked={"TRAINMETER_RUN_DIR": str(m.run_dir), "TRAINMETER_RUN_PARENT": os.environ["TRAINMETER_RUN_PARENT"]},
            root={"TRAINMETER_RUN_DIR": "/", "TRAINMETER_RUN_PARENT": "1"},
        )
    for key, child in done.items():
        assert child.returncode == 0, (key, child.stderr)
    assert [p.name for p in m.run_dir.iterdir() if p.is_dir()] == [f"proc-{done['marked'].stdout.strip()}"]
    assert done["marked"].stderr == ""
    assert not Path(f"/proc-{done['root'].stdout.strip()}").exists()  # never a seat in the filesystem's root
    assert done["root"].stderr == ("trainmeter: this child is not recorded: TRAINMETER_RUN_DIR=/ is not the run "
                                   "folder of a monitored parent\n")


@pytest.mark.parametrize("folder", ["unmarked", "forged"])
def test_a_folder_no_monitored_parent_marked_is_never_written_and_said_once(tmp_path, monkeypatch, capsys, folder):
    import torch

    from trainmeter.core import monitor as monitor_module
    from trainmeter.ranks import autostart
    from trainmeter.ranks.seating import mark_parent_folder

    target = tmp_path / folder
    target.mkdir()
    if folder == "forged":
        mark_parent_folder(target, 2)  # another parent's mark
    for name, value in (("_armed", False), ("_fired", False), ("_refused", False), ("_monitor", None)):
        monkeypatch.setattr(autostart, name, value)
    monkeypatch.setenv("TRAINMETER_RUN_DIR", str(target))
    monkeypatch.setenv("TRAINMETER_RUN_PARENT", "1")
    autostart.arm()
    autostart.arm()  # a second import of the arming: still one line
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    assert autostart.auto_monitor() is None and monitor_module.active() is None
    assert [p.name for p in target.iterdir()] == ([".trainmeter-parent"] if folder == "forged" else [])
    assert capsys.readouterr().err == (f"trainmeter: this child is not recorded: TRAINMETER_RUN_DIR={target} is not "
                                       "the run folder of a monitored parent\n")
