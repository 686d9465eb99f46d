"""Following files another process writes: bounded reads, torn lines, seats appearing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from trainmeter.ranks.follow import RunFollower, TailReader, newest_live_run
from trainmeter.record.events import head, last_of_kinds


def line(**record) -> str:
    return json.dumps(record) + "\n"


def bytes_read(follower: RunFollower) -> int:
    """Bytes a follower read so far over every file (each reader counts its own)."""
    return sum(r.bytes_read for r in follower._readers.values())


def test_a_torn_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "events.jsonl"
    text = line(kind="interval", step=1)
    path.write_text(line(kind="start") + text[:7])
    reader = TailReader(path)
    assert [r["kind"] for r in reader.read()] == ["start"]
    with path.open("a") as f:
        f.write(text[7:])
    assert reader.read() == [{"kind": "interval", "step": 1}]
    assert reader.read() == []


def test_reads_are_bounded_and_still_get_every_record(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(line(kind="interval", step=i) for i in range(50)))
    reader = TailReader(path, max_bytes=100)
    got, reads = [], 0
    while True:
        before = reader.offset
        got += reader.read()
        reads += 1
        assert reader.offset - before <= 100
        if reader.offset == before:
            break
    assert [r["step"] for r in got] == list(range(50)) and reads > 10


def test_a_line_longer_than_a_read_is_skipped_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(line(kind="big", pad="x" * 500) + line(kind="interval", step=2))
    reader = TailReader(path, max_bytes=64)
    got = []
    for _ in range(20):
        got += reader.read()
    assert got == [{"kind": "interval", "step": 2}]


def test_a_replaced_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(line(kind="a") * 5)
    reader = TailReader(path)
    reader.read()
    path.write_text(line(kind="b"))
    assert reader.read() == [{"kind": "b"}]


def test_head_and_last_records(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(line(kind="start") + line(kind="rank", rank=1) + "".join(
        line(kind="interval", step=i) for i in range(100)) + line(kind="end", status="completed"))
    assert [r["kind"] for r in head(path, max_bytes=60)] == ["start", "rank"]
    last = last_of_kinds(path, ("interval", "end"), max_bytes=200)
    assert last["interval"]["step"] == 99 and last["end"]["status"] == "completed"


def test_the_follower_finds_seats_that_appear_later_and_their_status(tmp_path):
    follower = RunFollower(tmp_path)
    assert follower.poll() == {}
    seat = tmp_path / "rank-1"
    seat.mkdir()
    (seat / "events.jsonl").write_text(line(kind="rank", rank=1, node="n") + line(kind="interval", step=4, tokens=40))
    follower.poll()
    (ranked,) = follower.ranks()
    assert (ranked.rank, ranked.steps, ranked.tokens, ranked.status) == (1, 4, 40, "running")
    with (seat / "events.jsonl").open("a") as f:
        f.write(line(kind="steps", step=[5, 6]) + line(kind="end", status="completed"))
    follower.poll()
    assert (ranked.steps, ranked.status) == (6, "completed")
    assert bytes_read(follower) == (seat / "events.jsonl").stat().st_size


def test_newest_live_run_is_the_folder_whose_log_grew_last(tmp_path):
    old, new = tmp_path / "a", tmp_path / "b"
    (old / "rank-0").mkdir(parents=True)
    new.mkdir()
    (old / "rank-0" / "events.jsonl").write_text(line(kind="start"))
    (new / "events.jsonl").write_text(line(kind="start"))
    past = time.time() - 50
    os.utime(new / "events.jsonl", (past, past))
    assert newest_live_run(tmp_path) == old
    assert newest_live_run(tmp_path, within_s=0.0) is None
    assert newest_live_run(Path(tmp_path / "missing")) is None
