"""A killed kernel resumed in a new one (docs/spec.md section 22): a process training under ``tm.monitor`` is killed
with SIGKILL after ``tm.checkpoint()`` at step 8; a new run ``resume="last"`` loads that checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import trainmeter as tm

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")

WAIT_S = 120.0  # generous: the machine may be loaded

DOOMED = """
import sys, time, torch, trainmeter as tm
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with tm.monitor(name="doomed", run_dir=sys.argv[1], interval_s=0.2):
    for i in range(1_000_000):
        g = torch.Generator().manual_seed(i + 1)
        x = torch.randint(0, 50, (4, 6), generator=g)
        torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
        opt.step()
        opt.zero_grad()
        if i == 6:
            tm.checkpoint()  # taken after the next step: step 8
        time.sleep(0.01)
"""


def _wait(what: str, ready) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _logged_steps(run: tm.Run) -> int:
    """The last step of the run log's per-step records (a heartbeat may have counted later ones)."""
    return max([0, *(n for e in run.events() if e.get("kind") == "steps" for n in e["step"])])


def _killed_run(run_root: Path) -> Path:
    """Start the doomed loop in a process of its own; SIGKILL it once its log holds steps after the checkpoint."""
    src = str(Path(tm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", DOOMED, str(run_root)], env=env, stdout=subprocess.DEVNULL)
    try:
        def logged_past_the_checkpoint() -> bool:
            assert proc.poll() is None, "the doomed loop ended before it was killed"
            folders = [f for f in run_root.glob("*-doomed") if (f / "events.jsonl").exists()]
            return bool(folders) and (folders[0] / "checkpoints" / "step-8.pt").exists() and \
                _logged_steps(tm.load(folders[0])) >= 12

        _wait("the doomed run's log to pass step 12", logged_past_the_checkpoint)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (folder,) = run_root.glob("*-doomed")
    assert not (folder / "passport.json").exists()
    _wait("the killed run's log to fall silent", lambda: tm.load(folder).status == "killed")
    return folder


def test_a_killed_run_is_listed_killed_and_resumed_from_its_last_checkpoint_with_its_lost_work_and_goodput(
        run_root, ip, capsys):
    folder = _killed_run(run_root)
    killed = tm.load(folder)
    killed_steps = killed.passport["steps"]
    assert killed.status == "killed" and "killed" in killed.passport["warnings"][0]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with tm.monitor(name="again", run_dir=run_root, resume="last") as m:  # a new kernel's cell
        saved = torch.load(folder / "checkpoints" / "step-8.pt", weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(9, 21):
            g = torch.Generator().manual_seed(step)
            x = torch.randint(0, 50, (4, 6), generator=g)
            torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
            opt.step()
            opt.zero_grad()
    lineage = json.loads((m.run_dir / "passport.json").read_text())["lineage"]
    assert lineage["parent"] == f"../{folder.name}"
    assert [(r["name"], r["status"], r["steps"]) for r in lineage["runs"]] == [
        ("doomed", "killed", killed_steps), ("again", "completed", 12)]
    resumed = lineage["resumed_from"]
    assert (resumed["step"], resumed["parent_step"], resumed["provenance"]) == (8, 8, "detected")
    assert resumed["checkpoint"] == "checkpoints/step-8.pt" and "run log" in resumed["source"]
    lost, training = lineage["lost_work"], lineage["training"]
    exact = _logged_steps(killed) == killed_steps  # else a heartbeat counted steps whose tokens the log lacks
    assert lost["steps"] == killed_steps - 8 and lost["tokens"] == ((killed_steps - 8) * 4 * 6 if exact else None)
    assert lost["time_s"] > 0 and lineage["restart_s"] >= 0
    assert training["steps"] == 20 and training["tokens"] == 20 * 4 * 6
    assert training["wall_s"] >= killed.passport["elapsed_s"] and 0 < training["goodput"] < 1
    assert training["useful_s"] == pytest.approx(training["wall_s"] - training["lost_s"] - training["restart_s"])
    assert "- Goodput of the training: " in (m.run_dir / "passport.md").read_text()

    ip.run_line_magic("trainmeter", f"runs --dir {run_root}")
    lines = capsys.readouterr().out.splitlines()
    doomed = next(i for i, line in enumerate(lines) if " doomed " in line)
    assert "killed (last seen " in lines[doomed] and "└ again" in lines[doomed + 1]
    assert "= training" in lines[doomed + 2] and f"lost {killed_steps - 8} steps" in lines[doomed + 2]
    assert [[r.status for r in t] for t in tm.trainings(run_root)] == [["killed", "completed"]]
