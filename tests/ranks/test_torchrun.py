"""Two gloo DDP ranks under torchrun: one run folder, exact global steps and tokens, the slow rank named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "ddp_train.py"
SRC = Path(__file__).parents[2] / "src"
STEPS, TOKENS_PER_RANK_STEP = 8, 4 * 8


def torchrun(root: Path, *, keep_parent: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK") + (() if keep_parent else ("TRAINMETER_RUN_DIR", "TRAINMETER_RUN_PARENT")):
        env.pop(key, None)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
         str(root), str(STEPS), "1", "0.03"], capture_output=True, text=True, env=env, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_gloo_ranks_under_torchrun_share_one_run_folder(tmp_path):
    out = torchrun(tmp_path)
    assert out.count("passport in ") == 2 and "rank-1" in out  # each rank's closing line
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # one folder, no race suffix
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["rank-0", "rank-1"]
    passport = json.loads((run_dir / "passport.json").read_text())
    d = passport["distributed"]
    assert (passport["status"], d["world_size"], d["nodes"], d["backend"]) == ("completed", 2, 1, "gloo")
    assert (passport["steps"], passport["tokens"]) == (STEPS, 2 * STEPS * TOKENS_PER_RANK_STEP)
    assert d["steps_together"] and [r["steps"] for r in d["ranks"]] == [STEPS, STEPS]
    assert [r["tokens"] for r in d["ranks"]] == [STEPS * TOKENS_PER_RANK_STEP] * 2
    # rank 1's loader sleeps twice as long; DDP makes step times equal, the time outside backward tells them apart
    assert d["stragglers"]["figure"] == "outside_backward_s" and d["stragglers"]["straggler"] == 1
    for k in (0, 1):
        own = json.loads((run_dir / f"rank-{k}" / "passport.json").read_text())
        assert own["distributed"]["identity"]["rank"] == k and own["distributed"]["identity"]["world_size"] == 2
        assert own["distributed"]["identity"]["source"] == "torchrun"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_torchrun_from_a_monitored_cell_seats_its_ranks_in_the_cell_run(tmp_path):
    import trainmeter as tm

    with tm.monitor(name="cell", run_dir=tmp_path / "cell") as m:  # what `!torchrun train.py` in a %%trainmeter cell does
        torchrun(tmp_path / "script-root", keep_parent=True)
    assert not (tmp_path / "script-root").exists()  # the script's own run root was not used
    assert sorted(p.name for p in m.run_dir.iterdir() if p.is_dir()) == ["rank-0", "rank-1"]
    d = json.loads((m.run_dir / "passport.json").read_text())["distributed"]
    assert (d["role"], d["world_size"], d["backend"], d["global_steps"]) == ("launch", 2, "gloo", STEPS)
    assert d["global_tokens"] == 2 * STEPS * TOKENS_PER_RANK_STEP


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_cell_that_runs_torchrun_speaks_for_the_launch_in_its_passport(tmp_path):
    """The parent trained nothing itself: its passport.md gives the launch's steps, tokens and ranks, no goodput;
    each rank's record starts as its optimizer is built (the autostart), so every step's tokens are counted."""
    import trainmeter as tm

    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    with tm.monitor(name="cell", run_dir=tmp_path / "cell") as m:  # `!torchrun train.py` in a %%trainmeter cell
        env.update({k: v for k, v in os.environ.items() if k.startswith("TRAINMETER_RUN")})
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               str(SCRIPT.with_name("ddp_plain.py")), str(STEPS)], capture_output=True, text=True,
                              env=env, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    p = json.loads((m.run_dir / "passport.json").read_text())
    d = p["distributed"]
    assert (d["role"], d["world_size"], d["global_steps"]) == ("launch", 2, STEPS)
    assert p["goodput"] is None  # the parent's own 100% is no figure of the launch
    md = (m.run_dir / "passport.md").read_text()
    assert f"Steps: {STEPS} (global, over 2 rank(s) of world size 2); tokens: {d['global_tokens']}" in md
    assert "Goodput" not in md
    # each rank's record began as its optimizer was built: step 1's batches are counted like the others
    assert d["global_tokens"] == 2 * STEPS * TOKENS_PER_RANK_STEP
    assert not any("first step" in n for n in d["notes"]) and "leave out the first step" not in md
    for k in (0, 1):
        own = json.loads((m.run_dir / f"rank-{k}" / "passport.json").read_text())
        assert own["tokens"] == STEPS * TOKENS_PER_RANK_STEP
        assert "first_step" not in own["series_info"]["tokens_per_step"]
