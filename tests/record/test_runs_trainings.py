"""The runs of one training grouped (docs/spec.md section 22): ``%trainmeter runs`` and ``tm.trainings`` over fake run
folders, with damaged and killed ones among them."""

from __future__ import annotations

import json
from pathlib import Path

import trainmeter as tm
from trainmeter.record.runs import runs_table


def _run(root: Path, stamp: str, name: str, parent: str | None = None, **training) -> str:
    folder = root / f"{stamp}-{name}"
    folder.mkdir(parents=True)
    passport = {"name": name, "status": "completed", "started_at": f"2026-01-01T{stamp[9:11]}:00:00+00:00",
                "elapsed_s": 60.0, "steps": 10, "tokens": 100, "token_unit": "tokens"}
    if parent is not None:
        passport["lineage"] = {"parent": f"../{parent}", "training": training or None}
    (folder / "passport.json").write_text(json.dumps(passport))
    return folder.name


def test_a_resumed_run_lists_under_its_parent_chain_then_the_trainings_counts_and_a_fork_under_its_own(tmp_path):
    first = _run(tmp_path, "20260101T010000Z", "first")
    _run(tmp_path, "20260101T020000Z", "other")
    second = _run(tmp_path, "20260101T030000Z", "second", first, steps=18, tokens=180, token_unit="tokens",
                  lost_steps=2, restart_s=30.0, wall_s=150.0, goodput=0.7)
    _run(tmp_path, "20260101T040000Z", "third", second, steps=26, tokens=None, token_unit=None, lost_steps=2,
         restart_s=None, wall_s=None, goodput=None)
    _run(tmp_path, "20260101T050000Z", "fork", first, steps=15, tokens=150, token_unit="tokens", lost_steps=5,
         restart_s=12.0, wall_s=140.0, goodput=0.81)
    rows = runs_table(tmp_path).rows
    assert [r.name for r in rows] == ["first", "└ second", "  └ third", "    = training", "└ fork", "  = training",
                                      "other"]
    third_training, fork_training = rows[3], rows[5]
    assert (third_training.steps, third_training.tokens, third_training.duration) == ("26", "—", "—")
    assert third_training.status == "lost 2 steps, restart —, goodput —"
    assert (fork_training.steps, fork_training.tokens, fork_training.duration) == ("15", "150", "0:02:20")
    assert fork_training.status == "lost 5 steps, restart 0:00:12, goodput 81.0%"
    assert [[r.name for r in t] for t in tm.trainings(tmp_path)] == [["first", "second", "third", "fork"], ["other"]]
    assert tm.load(tmp_path / second).parent == tmp_path / first and tm.load(tmp_path / first).parent is None


def test_damaged_killed_and_odd_parents_never_break_the_listing_of_the_others(tmp_path):
    first = _run(tmp_path, "20260101T010000Z", "first")
    _run(tmp_path, "20260101T020000Z", "self", "20260101T020000Z-self")  # its own parent
    _run(tmp_path, "20260101T030000Z", "gone", "20250101T000000Z-deleted")
    (tmp_path / "20260101T030000Z-gone" / "passport.json").write_text(json.dumps(
        {"name": "gone", "status": "completed", "lineage": {"parent": "../../elsewhere/x", "training": "nonsense"}}))
    broken = tmp_path / "20260101T040000Z-broken"
    broken.mkdir()
    (broken / "passport.json").write_bytes(b"\xff{not json")
    (broken / "events.jsonl").write_bytes(b"\x00\x01garbage\n")
    killed = tmp_path / "20260101T050000Z-killed"
    killed.mkdir()
    (killed / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"kind": "start", "name": "killed", "started_at": "2026-01-01T05:00:00+00:00",
         "options": {"interval_s": 10.0, "resume": f"../{first}"}},
        {"kind": "interval", "step": 40, "tokens": 400, "token_unit": "tokens", "elapsed_s": 65.0},
        {"kind": "heartbeat", "step": 42, "steps_done": 41, "elapsed_s": 90.0}]))
    table = runs_table(tmp_path)
    by_name = {r.name.lstrip(" └"): r for r in table.rows}
    assert set(by_name) == {"first", "self", "gone", "20260101T040000Z-broken", "killed"}
    assert by_name["killed"].status == "killed (last seen 05:01:30) *" and by_name["killed"].steps == "41"
    assert table.rows[0].name == "first" and table.rows[1].name == "└ killed"
    assert by_name["20260101T040000Z-broken"].status.startswith("damaged")
    groups = tm.trainings(tmp_path)
    assert sorted(r.name for t in groups for r in t) == sorted(["first", "self", "gone", "killed",
                                                                 "20260101T040000Z-broken"])
    (run,) = [r for t in groups for r in t if r.name == "killed"]
    assert run.status == "killed" and run.passport["steps"] == 41
    assert run.passport["last_seen_at"] == "2026-01-01T05:01:30+00:00"
