"""A killed kernel resumed in a new one (docs/spec.md section 22): a process training under ``tm.monitor`` (itself
resuming a first run of 6 steps) is killed with SIGKILL after ``tm.checkpoint()`` at its step 8; a new run
``resume="last"`` loads that checkpoint; and a loop's own ``torch.save`` outside the run folder, read from the killed
run's log (its ``checkpoint`` records, docs/spec.md section 6)."""

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
with tm.monitor(name="doomed", run_dir=sys.argv[1], interval_s=0.2, resume="last"):
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
    """The run's own last step in its log's per-step records (a heartbeat may have counted later ones); a resumed
    run logs steps of the training, from its first one on (docs/spec.md section 22)."""
    logged = [n for e in run.events() if e.get("kind") == "steps" for n in e["step"]]
    return max(logged) - logged[0] + 1 if logged else 0


def _step(model, opt, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, 50, (4, 6), generator=g)
    torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
    opt.step()
    opt.zero_grad()


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


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
    model, opt = _model()
    with tm.monitor(name="origin", run_dir=run_root) as origin:  # the training's first run: 6 steps
        for step in range(1, 7):
            _step(model, opt, step)
    folder = _killed_run(run_root)  # resumes it (nothing loaded: the model in memory, step 6 assumed)
    killed = tm.load(folder)
    killed_steps = killed.passport["steps"]
    assert killed.status == "killed" and "killed" in killed.passport["warnings"][0]
    model, opt = _model()
    with tm.monitor(name="again", run_dir=run_root, resume="last") as m:  # a new kernel's cell
        saved = torch.load(folder / "checkpoints" / "step-8.pt", weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(15, 27):
            _step(model, opt, step)
    lineage = json.loads((m.run_dir / "passport.json").read_text())["lineage"]
    assert lineage["parent"] == f"../{folder.name}"
    assert [(r["name"], r["status"], r["steps"], r["resumed_from_step"]) for r in lineage["runs"]] == [
        ("origin", "completed", 6, None), ("doomed", "killed", killed_steps, 6), ("again", "completed", 12, 14)]
    resumed = lineage["resumed_from"]
    assert (resumed["step"], resumed["parent_step"], resumed["provenance"]) == (14, 8, "detected")
    assert resumed["checkpoint"] == "checkpoints/step-8.pt" and "run log" in resumed["source"]
    lost, training = lineage["lost_work"], lineage["training"]
    exact = _logged_steps(killed) == killed_steps  # else a heartbeat counted steps whose tokens the log lacks
    assert lost["steps"] == killed_steps - 8 and lost["tokens"] == ((killed_steps - 8) * 4 * 6 if exact else None)
    assert lost["time_s"] > 0 and lineage["restart_s"] >= 0 and training["lost_steps"] == killed_steps - 8
    assert training["steps"] == 26 and training["tokens"] == 26 * 4 * 6
    origin_s = json.loads((origin.run_dir / "passport.json").read_text())["elapsed_s"]
    assert training["wall_s"] >= origin_s + killed.passport["elapsed_s"] and 0 < training["goodput"] < 1
    assert training["useful_s"] == pytest.approx(training["wall_s"] - training["lost_s"] - training["restart_s"])
    assert "- Goodput of the training: " in (m.run_dir / "passport.md").read_text()
    (panel,) = [p for p in json.loads((m.run_dir / "dashboard.json").read_text())["panels"] if p["id"] == "lineage"]
    rows = {row["label"]: row["value"] for row in panel["rows"]}
    assert rows["Runs"] == "origin → doomed → again" and rows["Steps of the training"] == 26
    assert rows["Lost work (steps)"] == killed_steps - 8 and 0 < rows["Goodput of the training"] < 1

    ip.run_line_magic("trainmeter", f"runs --dir {run_root}")
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if " origin " in line)
    assert "└ doomed" in lines[first + 1] and "killed (last seen " in lines[first + 1]
    assert "  └ again" in lines[first + 2] and "= training" in lines[first + 3]
    assert f"lost {killed_steps - 8} steps" in lines[first + 3] and " 26 " in lines[first + 3]
    assert [[r.status for r in t] for t in tm.trainings(run_root)] == [["completed", "killed", "completed"]]


OWN_SAVER = """
import sys, time, torch, trainmeter as tm
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with tm.monitor(name="own-saver", run_dir=sys.argv[1], interval_s=0.2):
    for i in range(1_000_000):
        g = torch.Generator().manual_seed(i + 1)
        x = torch.randint(0, 50, (4, 6), generator=g)
        torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
        opt.step()
        opt.zero_grad()
        if i == 7:  # step 8: the loop's own save, outside the run folder, by a path relative to the working folder
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, "ckpt/step8.pt")
        time.sleep(0.01)
"""


def test_a_killed_runs_own_torch_save_outside_its_folder_is_read_from_its_log_and_loaded_as_detected(
        run_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook's working folder, the same after the kernel restarts
    (tmp_path / "ckpt").mkdir()
    src = str(Path(tm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", OWN_SAVER, str(run_root)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL)
    try:
        def logged_past_the_save() -> bool:
            assert proc.poll() is None, "the loop ended before it was killed"
            folders = [f for f in run_root.glob("*-own-saver") if (f / "events.jsonl").exists()]
            return bool(folders) and _logged_steps(tm.load(folders[0])) >= 12

        _wait("the run's log to pass step 12", logged_past_the_save)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (folder,) = run_root.glob("*-own-saver")
    assert not (folder / "passport.json").exists() and not (folder / "checkpoints").exists()
    (logged,) = [e for e in tm.load(folder).events() if e["kind"] == "checkpoint"]
    size = (tmp_path / "ckpt" / "step8.pt").stat().st_size
    assert logged == {"schema_version": 1, "kind": "checkpoint", "step": 8, "path": "ckpt/step8.pt", "bytes": size,
                      "source": "torch.save"}
    assert tm.load(folder).passport["checkpoints"] == [
        {"path": "ckpt/step8.pt", "step": 8, "bytes": size, "source": "torch.save"}]
    _wait("the killed run's log to fall silent", lambda: tm.load(folder).status == "killed")
    model, opt = _model()
    with tm.monitor(name="after-kill", run_dir=run_root, resume="last") as m:
        saved = torch.load("ckpt/step8.pt", weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(9, 13):
            _step(model, opt, step)
    lineage = json.loads((m.run_dir / "passport.json").read_text())["lineage"]
    resumed = lineage["resumed_from"]
    assert (resumed["step"], resumed["parent_step"], resumed["provenance"], resumed["checkpoint"]) == (
        8, 8, "detected", "ckpt/step8.pt")
    assert lineage["training"]["steps"] == 12 and lineage["lost_work"]["steps"] == tm.load(folder).passport["steps"] - 8
