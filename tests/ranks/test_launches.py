"""Children launched by a monitored parent are recorded as its ranks and never write into its run.

Each test runs tests/ranks/scripts/launch_children.py in a fresh interpreter
(fork and spawn need a process of their own): the parent trains 3 steps, then
launches two children that train ``steps`` steps each.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
SRC = Path(__file__).parents[2] / "src"
TOKENS_PER_STEP = 12


def launch(root: Path, how: str, steps: int, *, slow: int = -1, sleep_s: float = 0.0, kill_at: int = -1,
           parent_steps: int = 3):
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for key in ("TRAINMETER_RUN_DIR", "TRAINMETER_RUN_PARENT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, str(SCRIPTS / "launch_children.py"), str(root), how, str(steps), str(slow),
                           str(sleep_s), str(kill_at), str(parent_steps)], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run_dir, json.loads((run_dir / "passport.json").read_text()), done.stdout


def parent_steps_in_log(run_dir: Path) -> list[int]:
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "steps":
            out += record["step"]
    return out


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_forked_children_become_ranks_and_never_touch_the_parent_run(tmp_path):
    run_dir, passport, stdout = launch(tmp_path, "fork", 10)
    assert passport["steps"] == 3 and parent_steps_in_log(run_dir) == [1, 2, 3]  # the parent's own, only
    shown = [int(n) for n in re.findall(r"^\[step (\d+)\]", stdout, re.M)]
    assert all(n <= 3 for n in shown)  # no child printed its text line into the parent's output
    assert stdout.count("trainmeter: run ") == 1
    d = passport["distributed"]
    assert (d["role"], d["world_size"], d["ranks_recorded"]) == ("launch", 2, 2)
    assert [(r["seat"], r["status"], r["steps"], r["tokens"]) for r in d["ranks"]] == [
        ("rank-0", "completed", 10, 10 * TOKENS_PER_STEP), ("rank-1", "completed", 10, 10 * TOKENS_PER_STEP)]
    assert (d["global_steps"], d["global_tokens"]) == (10, 20 * TOKENS_PER_STEP)
    assert any("training ran in 2 child process(es), recorded as ranks" in w for w in passport["warnings"])


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_parent_that_trained_nothing_gives_the_launchs_global_figures_in_its_headline_and_closing_line(tmp_path):
    run_dir, passport, stdout = launch(tmp_path, "fork", 10, parent_steps=0)  # notebook_launcher's way
    d = passport["distributed"]
    assert (d["global_steps"], d["global_tokens"], d["token_unit"]) == (10, 20 * TOKENS_PER_STEP, "tokens")
    assert (passport["steps"], passport["tokens"], passport["token_unit"]) == (10, 20 * TOKENS_PER_STEP, "tokens")
    rate = next(x for x in passport["derivations"] if x["name"] == "session_tokens_per_s")
    assert rate["value"] == passport["throughput"]["session_tokens_per_s"]
    assert rate["value"] == pytest.approx(20 * TOKENS_PER_STEP / passport["elapsed_s"])
    assert passport["goodput"] is None and passport["throughput"]["train_tokens_per_s"] is None
    (closing,) = [line for line in stdout.splitlines() if line.startswith("trainmeter: run ")]
    assert f"completed after 10 steps (global, over 2 rank(s)), {20 * TOKENS_PER_STEP} tokens, " in closing
    assert "tokens/s (all ranks, session)" in closing
    markdown = (run_dir / "passport.md").read_text()
    assert f"- Steps: 10 (global, over 2 rank(s) of world size 2); tokens: {20 * TOKENS_PER_STEP}" in markdown
    assert "tokens/s over all ranks" in markdown
    assert f"TILES 10 {20 * TOKENS_PER_STEP} tokens False" in stdout  # the dashboard's step and tokens tiles too
    assert not re.search(r"\b0(\.0)? tokens|tokens: 0\b|\b0 steps", markdown + closing)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_spawned_children_that_import_trainmeter_record_themselves_as_ranks(tmp_path):
    run_dir, passport, _ = launch(tmp_path, "spawn", 6)
    d = passport["distributed"]
    # started as each child built its optimizer: every step and every step's batch counted, the first one's too
    assert [(r["seat"], r["status"], r["steps"], r["tokens"]) for r in d["ranks"]] == [
        ("rank-0", "completed", 6, 6 * TOKENS_PER_STEP), ("rank-1", "completed", 6, 6 * TOKENS_PER_STEP)]
    assert parent_steps_in_log(run_dir) == [1, 2, 3]
    assert d["children_spawned"] == 2 and not any("spawn method" in note for note in d["notes"])


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_killed_rank_is_shown_dead_with_its_last_step_and_a_slow_rank_is_named(tmp_path):
    _, passport, _ = launch(tmp_path, "process", 12, slow=1, sleep_s=0.03, kill_at=8)
    d = passport["distributed"]
    alive, killed = d["ranks"]
    assert (alive["status"], alive["steps"]) == ("completed", 12)
    assert killed["status"] == "died" and 1 <= killed["steps"] <= 8
    assert f"rank-1 died at step {killed['steps']}" in d["notes"]
    assert not d["steps_together"]
    assert d["stragglers"]["straggler"] == 1
    assert d["stragglers"]["verdict"].startswith("rank 1 is ")
    assert d["stragglers"]["windows"] >= 1 and d["stragglers"]["named_windows"].get("1", 0) >= 1
