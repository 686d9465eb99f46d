"""The run log's schema and reader: each record kind round-trips, one tolerance rule, bounded head and tail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.record.schema import (
    CheckpointLogRecord,
    ColumnsRecord,
    EndRecord,
    GapRecord,
    IntervalRecord,
    RankRecord,
    StartRecord,
)
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record import events
from trainmeter.record.events import (
    BLOCK_BYTES,
    ReadStats,
    head,
    iter_events,
    last_of_kinds,
    read_events,
    tail,
)
from trainmeter.record.runlog import RunLog
from trainmeter.record.runs import load, runs, summarise_log

KINDS = ("start", "rank", "steps", "series", "interval", "gap", "checkpoint", "end")  # every kind the writer writes
SCHEMAS: dict[str, Any] = {"start": StartRecord, "rank": RankRecord, "steps": ColumnsRecord,
                           "series": ColumnsRecord, "interval": IntervalRecord, "gap": GapRecord, "end": EndRecord,
                           "checkpoint": CheckpointLogRecord}


def _rec(kind: str, **fields: Any) -> events.Record:
    """A record as RunLog.write builds it: ``schema_version``, ``kind``, then ``fields``."""
    return {"schema_version": events.SCHEMA_VERSION, "kind": kind, **fields}


def _one_of_each() -> list[events.Record]:
    return [
        _rec("start", name="r", started_at="2026-01-01T00:00:00+00:00", options={"interval_s": 1.0},
             environment={"python": "3.11"}),
        _rec("rank", launch_dir="/l", pid=7, device="cuda:1", rank=1, local_rank=1, world_size=2, node="node-0"),
        _rec("steps", name="steps", x="step", step=[1, 2], t_us=[10, 20], value=[32, 32]),
        _rec("series", name="train_loss", x="step", step=[1, 2], t_us=[10, 20], value=[2.5, None]),
        _rec("interval", step=2, tokens=64, token_unit="tokens", elapsed_s=1.5, phases_s={"train": 1.0},
             throughput={"train_tokens_per_s": 64.0, "seconds_per_step": 0.5, "session_tokens_per_s": 42.0,
                         "window_tokens": 64, "window_steps": 2, "window_train_s": 1.0},
             memory=None, compute={"mfu[hf]": 0.4}),
        _rec("gap", from_step=2, to_step=5, failed_writes=3, dropped_points=0, error="OSError: No space"),
        _rec("checkpoint", step=2, path="ckpt/step2.pt", bytes=1024, source="torch.save"),
        _rec("end", status="completed", ended_at="2026-01-01T00:01:00+00:00", error=None),
    ]


def _lines(path: Path, records: list[dict[str, Any]], tail_text: str = "") -> Path:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records) + tail_text)
    return path


def test_every_kind_the_writer_builds_reads_back_equal_and_typed(tmp_path):
    log = RunLog(tmp_path / "events.jsonl")
    written = _one_of_each()
    for record in written:
        log.write(**{k: v for k, v in record.items() if k != "schema_version"})
    log.close()
    got = read_events(tmp_path / "events.jsonl")
    assert got == written
    assert [r["kind"] for r in got] == ["start", "rank", "steps", "series", "interval", "gap", "checkpoint",
                                          "end"]
    assert set(r["kind"] for r in got) == set(KINDS)
    for record in got:
        assert record["schema_version"] == events.SCHEMA_VERSION
        assert SCHEMAS[record["kind"]].__required_keys__ <= set(record)


def test_a_built_record_is_the_same_line_as_write_with_fields(tmp_path):
    log = RunLog(tmp_path / "a.jsonl")
    log.write("end", status="failed", ended_at=None, error="boom")
    log.close()
    built = _rec("end", status="failed", ended_at=None, error="boom")
    assert (tmp_path / "a.jsonl").read_bytes() == (json.dumps(built, separators=(",", ":")) + "\n").encode()


def test_a_monitored_run_writes_only_known_kinds_each_with_its_schemas_keys(run_root):
    clock = FakeClock(100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="schema"), clock=clock, text=False,
                     probes=False, extensions=[])
    m.start()
    for i in range(4):
        clock.advance(0.5)
        m.on_step(10)
        m.record({"train_loss": 2.0 - i * 0.1})
    m.finish("completed")
    got = read_events(m.run_dir / "events.jsonl")
    assert {r["kind"] for r in got} == {"start", "steps", "series", "interval", "end"}
    for record in got:
        assert record["kind"] in KINDS
        assert SCHEMAS[record["kind"]].__required_keys__ <= set(record), record["kind"]


def test_a_torn_last_line_is_skipped_by_every_reader_and_said_apart_from_damage(tmp_path):
    path = _lines(tmp_path / "events.jsonl", [{"kind": "start"}, {"kind": "interval", "step": 1}],
                  '{"kind":"interval","st')
    stats = ReadStats()
    assert [r["kind"] for r in iter_events(path, stats=stats)] == ["start", "interval"]
    assert stats.torn_last_line and stats.lines_skipped == 0
    assert [r["kind"] for r in head(path)] == ["start", "interval"]
    tail_stats = ReadStats()
    assert [r["kind"] for r in tail(path, stats=tail_stats)] == ["start", "interval"]
    assert tail_stats.torn_last_line and tail_stats.lines_skipped == 0
    assert last_of_kinds(path, ("interval",))["interval"]["step"] == 1


def test_a_damaged_line_in_the_middle_is_skipped_and_counted_and_the_rest_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"kind":"start"}\nnot json at all\n\xff\xfe garbage\n[1, 2]\n\n'
                     b'{"kind":"end","status":"completed"}\n')
    stats = ReadStats()
    assert [r["kind"] for r in read_events(path, stats=stats)] == ["start", "end"]
    assert stats.lines_skipped == 3 and not stats.torn_last_line
    assert [r["kind"] for r in head(path)] == ["start", "end"] == [r["kind"] for r in tail(path)]


def test_a_damaged_log_is_summarised_from_what_it_holds_and_marked(tmp_path):
    folder = tmp_path / "20260101T000000Z-broken"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(
        b'{"kind":"start","name":"broken"}\n\xff\xff\n{"kind":"interval","step":7,"tokens":70,"elapsed_s":3.0}\n')
    summary = summarise_log(folder / "events.jsonl")
    assert (summary["name"], summary["steps"], summary["status"]) == ("broken", 7, "unfinished")
    assert [r["kind"] for r in load(folder).events()] == ["start", "interval"]  # replay reads it too
    assert any("damaged" in w and "1 unreadable" in w for w in summary["warnings"])
    good = tmp_path / "20260102T000000Z-good"
    good.mkdir()
    (good / "events.jsonl").write_text('{"kind":"start","name":"good"}\n')
    assert [r.name for r in runs(tmp_path)] == ["broken", "good"]
    assert not any("damaged" in w for w in load(good).passport["warnings"])


def test_a_missing_log_raises_for_iter_events_and_reads_empty_for_head_and_tail(tmp_path):
    with pytest.raises(OSError):
        read_events(tmp_path / "none.jsonl")
    assert head(tmp_path / "none.jsonl") == [] and tail(tmp_path / "none.jsonl") == []
    assert last_of_kinds(tmp_path / "none.jsonl", ("end",)) == {}


def test_head_leaves_out_the_line_its_window_cuts_and_tail_the_first_line_of_its_window(tmp_path):
    path = _lines(tmp_path / "events.jsonl", [{"kind": "interval", "step": i} for i in range(10)])
    width = len(path.read_bytes()) // 10  # every line has the same length here
    assert [r["step"] for r in head(path, max_bytes=width * 3 + 2)] == [0, 1, 2]
    assert [r["step"] for r in tail(path, max_bytes=width * 3)] == [8, 9]  # the window starts on a line: still cut
    assert [r["step"] for r in tail(path, max_bytes=width * 10)] == list(range(10))


def test_kinds_filter_the_records_and_n_keeps_the_first_or_last(tmp_path):
    records = [{"kind": "start"}, *({"kind": "steps", "step": [i]} for i in range(5)),
               {"kind": "interval", "step": 5}, {"kind": "series", "name": "interval"}, {"kind": "end"}]
    path = _lines(tmp_path / "events.jsonl", records)
    assert [r["kind"] for r in read_events(path, kinds=("interval", "end"))] == ["interval", "end"]
    assert head(path, 2, kinds=("steps",)) == [{"kind": "steps", "step": [0]}, {"kind": "steps", "step": [1]}]
    assert tail(path, 2, kinds=("steps", "interval")) == [{"kind": "steps", "step": [4]},
                                                          {"kind": "interval", "step": 5}]
    assert [r["kind"] for r in tail(path, 3)] == ["interval", "series", "end"]


def _big_log(path: Path, lines: int = 20_000) -> Path:
    filler = "".join(json.dumps({"kind": "steps", "step": [i], "value": [i] * 20}) + "\n" for i in range(lines))
    path.write_text(json.dumps({"kind": "start", "name": "big"}) + "\n" + filler
                    + json.dumps({"kind": "end", "status": "completed"}) + "\n")
    return path


def test_head_and_tail_of_a_large_log_read_only_the_blocks_they_need(tmp_path):
    path = _big_log(tmp_path / "events.jsonl")
    size = path.stat().st_size
    assert size > 50 * BLOCK_BYTES
    stats = ReadStats()
    assert head(path, 1, stats=stats) == [{"kind": "start", "name": "big"}]
    assert stats.bytes_read <= BLOCK_BYTES
    stats = ReadStats()
    assert tail(path, 1, stats=stats) == [{"kind": "end", "status": "completed"}]
    assert stats.bytes_read <= BLOCK_BYTES
    stats = ReadStats()
    assert last_of_kinds(path, ("end",), stats=stats)["end"]["status"] == "completed"
    assert stats.bytes_read <= BLOCK_BYTES
    stats = ReadStats()
    tail(path, stats=stats)  # no n: the whole default window, never the file
    assert stats.bytes_read == events.TAIL_BYTES < size


class _Counting:
    """A binary file that counts the bytes its reads return."""

    def __init__(self, f: Any, counter: list[int]) -> None:
        self._f, self._counter = f, counter

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._counter[0] += len(data)
        return data

    def __iter__(self):
        for line in self._f:
            self._counter[0] += len(line)
            yield line

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def test_the_file_itself_is_read_only_as_far_as_head_and_tail_need(tmp_path, monkeypatch):
    path = _big_log(tmp_path / "events.jsonl")
    counter = [0]
    import trainmeter.record.events as events_module

    real_open = events_module.open_regular
    monkeypatch.setattr(events_module, "open_regular", lambda p, **k: _Counting(real_open(p, **k), counter))
    head(path, 1)
    tail(path, 1)
    assert 0 < counter[0] <= 2 * BLOCK_BYTES
    counter[0] = 0
    assert len(read_events(path)) == 20_002 and counter[0] == path.stat().st_size  # the full read: every byte
