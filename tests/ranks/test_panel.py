"""The live ranks panel: a row per rank, dead and silent ranks said so, the straggler verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from trainmeter.ranks.follow import RunFollower
from trainmeter.ranks.merge import ranks_panel
from trainmeter.ranks.seating import this_node


def write_seat(root, k, *, steps, outside, pid, end=None):
    d = root / f"rank-{k}"
    d.mkdir(parents=True)
    records = [{"kind": "rank", "rank": k, "node": this_node(), "pid": pid},
               {"kind": "interval", "step": steps, "tokens": steps * 4, "throughput": {"seconds_per_step": 0.5},
                "distributed": {"timing": {"outside_backward_s": outside, "window": {"outside_backward_s": outside}}}}]
    if end:
        records.append({"kind": "end", "status": end})
    (d / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_rows_per_rank_with_status_and_the_verdict(tmp_path):
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    write_seat(tmp_path, 0, steps=10, outside=0.1, pid=os.getpid(), end="completed")
    write_seat(tmp_path, 1, steps=7, outside=0.3, pid=gone)
    write_seat(tmp_path, 2, steps=9, outside=0.1, pid=os.getpid())
    follower = RunFollower(tmp_path)
    follower.poll()
    panel = ranks_panel(follower)
    assert panel["title"] == "Ranks (3)"
    rows = {row["label"]: row for row in panel["rows"]}
    assert rows["rank 0"]["value"] == 10 and rows["rank 0"]["note"].startswith("completed")
    assert rows["rank 1"]["note"].startswith("died at step 7")
    assert rows["rank 2"]["note"].startswith("running; 0.5 s/step")
    assert panel["note"].startswith("rank 1 is 3.0x slower than the median")
    later = ranks_panel(follower, now_s=time.time() + 120)
    assert {r["label"]: r for r in later["rows"]}["rank 2"]["note"].startswith("silent for")


def test_no_rank_no_panel(tmp_path):
    follower = RunFollower(tmp_path)
    follower.poll()
    assert ranks_panel(follower) is None


def write_compute_seat(root, k, *, world_size=2, peak=989e12):
    d = root / f"rank-{k}"
    d.mkdir(parents=True)
    compute = {"convention": "hf", "flops_per_token": {"hf": 6.0e9}, "peak_flops_per_s": peak,
               "peak_text": "H100 SXM dense bf16: datasheet", "peak_provenance": "detected",
               "peak_missing": None if peak else "the model is on the CPU"}
    device = {"uuid": f"GPU-fa4e0000-0000-4000-8000-{k:012d}", "provenance": "detected"}
    records = [{"kind": "rank", "rank": k, "node": this_node(), "pid": os.getpid(), "world_size": world_size},
               {"kind": "interval", "step": 40, "tokens": 40960, "elapsed_s": 10.0 + k, "phases_s": {"train": 9.0},
                "distributed": {"compute": compute, "device": device}}]
    (d / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_panel_and_a_tile_show_mfu_over_every_ranks_device_live(tmp_path):
    from trainmeter.ranks.merge import launch_mfu_tile

    write_compute_seat(tmp_path, 0)
    write_compute_seat(tmp_path, 1)
    follower = RunFollower(tmp_path)
    follower.poll()
    rows = ranks_panel(follower)["rows"]
    assert [r["note"] for r in rows[:2]] == [f"running; GPU-fa4e0000-0000-4000-8000-{k:012d}" for k in (0, 1)]
    row = rows[-1]
    assert row["label"] == "MFU, all ranks (hf, 2 devices)"
    assert abs(row["value"] - 6.0e9 * 81920 / 11.0 / (2 * 989e12)) < 1e-15
    tile = launch_mfu_tile(follower.ranks())
    assert tile["id"] == "mfu_ranks" and tile["value"] == row["value"]
    assert tile["derivation"]["name"] == "distributed.mfu.session[hf]"


def test_the_launch_mfu_row_and_tile_badge_is_the_weakest_of_the_derivations_inputs(tmp_path):
    from trainmeter.ranks.merge import launch_mfu_tile

    write_compute_seat(tmp_path, 0)
    write_compute_seat(tmp_path, 1)
    follower = RunFollower(tmp_path)
    follower.poll()
    row = ranks_panel(follower)["rows"][-1]
    tile = launch_mfu_tile(follower.ranks())
    assert row["provenance"] == tile["provenance"] == "detected"  # F, devices and peak detected: not "measured"


def test_live_mfu_waits_for_every_rank_of_the_world_and_names_what_is_missing(tmp_path):
    write_compute_seat(tmp_path, 0, world_size=3)
    write_compute_seat(tmp_path, 1, world_size=3, peak=None)
    follower = RunFollower(tmp_path)
    follower.poll()
    row = ranks_panel(follower)["rows"][-1]
    assert row["value"] is None and row["note"].startswith("no record from rank(s) 2 of world size 3")
    (tmp_path / "rank-2").mkdir()
    write_compute_seat(tmp_path / "x", 2, world_size=3)
    (tmp_path / "x" / "rank-2" / "events.jsonl").rename(tmp_path / "rank-2" / "events.jsonl")
    follower.poll()
    row = ranks_panel(follower)["rows"][-1]
    assert row["value"] is None and "no dense peak for rank 1 (the model is on the CPU)" in row["note"]
