"""Merged figures of a launch from its seats' files."""

from __future__ import annotations

import json
import subprocess
import sys

from trainmeter.ranks.merge import distributed_section, read_launch, read_seat, write_launch_passport
from trainmeter.ranks.seating import this_node


def seat(root, k, *, steps, tokens, status="completed", timing=None, pid=None, passport=True):
    d = root / f"rank-{k}"
    d.mkdir(parents=True)
    rank = {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": this_node(),
            "backend": None, "pid": pid}
    interval = {"kind": "interval", "step": steps, "tokens": tokens, "elapsed_s": 1.0,
                "throughput": {"seconds_per_step": 0.1}, "phases_s": {"data_wait": 0.0},
                "distributed": {"backend": "gloo", "timing": timing or {}}}
    (d / "events.jsonl").write_text("\n".join(json.dumps(r) for r in ({"kind": "start"}, rank, interval)) + "\n")
    if passport:
        (d / "passport.json").write_text(json.dumps({
            "name": "ddp", "status": status, "steps": steps, "tokens": tokens, "elapsed_s": 2.0,
            "started_at": f"2026-01-01T00:00:0{k}+00:00", "ended_at": f"2026-01-01T00:01:0{k}+00:00",
            "token_unit": "tokens", "throughput": {"seconds_per_step": 0.1},
            "memory": {"rss_peak_bytes": 100 + k, "cuda": None},
            "distributed": {"role": "rank", "backend": "gloo", "timing": timing or {}}}))
    return d


def test_global_tokens_are_summed_and_steps_taken_together(tmp_path):
    seat(tmp_path, 0, steps=10, tokens=320, timing={"outside_backward_s": 0.1})
    seat(tmp_path, 1, steps=10, tokens=320, timing={"outside_backward_s": 0.2})
    section = distributed_section(read_launch(tmp_path))
    assert (section["world_size"], section["global_steps"], section["global_tokens"]) == (2, 10, 640)
    assert section["steps_together"] and section["nodes"] == 1 and section["backend"] == "gloo"
    assert section["stragglers"]["straggler"] == 1 and section["notes"] == []
    assert [r["peak_memory_bytes"] for r in section["ranks"]] == [100, 101]
    tokens = next(d for d in section["derivations"] if d["name"] == "global_tokens")
    assert [i["value"] for i in tokens["inputs"]] == [320, 320]


def test_ranks_that_did_not_step_together_are_said_so(tmp_path):
    seat(tmp_path, 0, steps=10, tokens=10)
    seat(tmp_path, 1, steps=7, tokens=7)
    section = distributed_section(read_launch(tmp_path))
    assert not section["steps_together"] and section["global_steps"] == 10
    assert "ranks did not step together: steps range 7-10" in section["notes"][0]


def test_a_killed_rank_shows_its_last_step_and_that_it_died(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    seat(tmp_path, 0, steps=10, tokens=10)
    seat(tmp_path, 1, steps=6, tokens=6, pid=int(gone.stdout), passport=False)
    dead = read_seat(tmp_path / "rank-1")
    assert (dead.status, dead.steps, dead.backend) == ("died", 6, "gloo")
    section = distributed_section(read_launch(tmp_path))
    assert "rank-1 died at step 6" in section["notes"]


def test_a_rank_killed_between_its_passport_files_is_incomplete_never_counted_completed(tmp_path):
    seat(tmp_path, 0, steps=10, tokens=10)
    cut = seat(tmp_path, 1, steps=10, tokens=10)  # passport.json lists passport.md, which the kill left unwritten
    (cut / "passport.json").write_text(json.dumps({**json.loads((cut / "passport.json").read_text()),
                                                   "files": ["events.jsonl", "passport.md"]}))
    (cut / "events.jsonl").touch()
    assert read_seat(cut).status == "damaged"
    section = distributed_section(read_launch(tmp_path))
    assert [r["status"] for r in section["ranks"]] == ["completed", "damaged"]
    assert "rank-1 damaged at step 10 (incomplete: passport.md missing)" in section["notes"]
    launch = write_launch_passport(tmp_path, "ddp")
    assert launch["status"] == "damaged" and launch["steps"] == 10
    (cut / "passport.md").write_text("# rank 1\n")  # whole again: completed
    assert write_launch_passport(tmp_path, "ddp")["status"] == "completed"


def test_a_rank_still_running_is_unfinished(tmp_path):
    import os

    seat(tmp_path, 0, steps=3, tokens=3, pid=os.getpid(), passport=False)
    assert read_seat(tmp_path / "rank-0").status == "unfinished"


def test_a_missing_rank_is_named(tmp_path):
    seat(tmp_path, 1, steps=3, tokens=3)
    assert "no record from rank(s) 0 of world size 2" in distributed_section(read_launch(tmp_path))["notes"]


def test_the_launch_passport_is_complete_only_when_every_rank_completed(tmp_path):
    seat(tmp_path, 0, steps=4, tokens=8)
    assert write_launch_passport(tmp_path, "ddp")["status"] == "unfinished"
    seat(tmp_path, 1, steps=4, tokens=8)
    p = write_launch_passport(tmp_path, "ddp")
    assert (p["status"], p["steps"], p["tokens"]) == ("completed", 4, 16)
    assert p["started_at"].endswith("00:00:00+00:00") and p["ended_at"].endswith("00:01:01+00:00")
    saved = json.loads((tmp_path / "passport.json").read_text())
    assert saved["distributed"]["global_tokens"] == 16
    assert "Global steps: 4" in (tmp_path / "passport.md").read_text()


def test_a_launch_folder_is_listed_with_its_ranks_and_loads_without_a_log_of_its_own(tmp_path):
    import trainmeter as tm
    from tests.fakes.runs import format_runs

    launch = tmp_path / "20260101T000000Z-ddp"
    seat(launch, 0, steps=4, tokens=8)
    seat(launch, 1, steps=4, tokens=8)
    write_launch_passport(launch, "ddp")
    (run,) = tm.runs(tmp_path)
    assert run.status == "completed" and run.events() == []
    row = format_runs([run]).splitlines()[1]
    assert "completed (2 ranks)" in row and " 4 " in row and " 16 " in row


def test_children_with_no_rank_are_not_a_world_with_missing_ranks(tmp_path):
    from trainmeter.ranks.merge import RankSummary

    section = distributed_section([RankSummary(seat="proc-1", rank=None, world_size=1, steps=7, tokens=28,
                                               status="completed")])
    assert section["notes"] == [] and section["world_size"] == 1
    assert not section["mfu_missing"].startswith("no record from rank")


def test_a_launch_whose_ranks_read_no_batch_has_unknown_global_tokens_never_zero(tmp_path):
    from trainmeter.core.throughput import BATCH_CALL
    from trainmeter.ranks.merge import render_markdown

    for k in (0, 1):
        d = seat(tmp_path, k, steps=5, tokens=None)
        p = json.loads((d / "passport.json").read_text())
        (d / "passport.json").write_text(json.dumps({**p, "token_unit": None}))
    p = write_launch_passport(tmp_path, "ddp")
    d = p["distributed"]
    assert (p["steps"], p["tokens"], p["token_unit"], d["global_tokens"]) == (5, None, None, None)
    assert [r["tokens"] for r in d["ranks"]] == [None, None]
    assert BATCH_CALL in next(x for x in d["derivations"] if x["name"] == "global_tokens")["missing"]
    assert f"samples/tokens: — (no rank read a batch: declare each with {BATCH_CALL})" in render_markdown(p)
