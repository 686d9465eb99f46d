import json

from trainmeter.record.runlog import RunLog, clean, read_events


def test_each_line_has_schema_version_and_non_finite_becomes_null(tmp_path):
    log = RunLog(tmp_path / "r" / "events.jsonl")
    log.write("interval", value=float("nan"), nested={"x": float("inf")})
    log.flush()
    line = json.loads((tmp_path / "r" / "events.jsonl").read_text())
    assert line == {"schema_version": 1, "kind": "interval", "value": None, "nested": {"x": None}}
    log.close()
    log.write("late")  # ignored after close


def test_torn_last_line_is_skipped(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_text('{"kind": "start"}\n{"kind": "inter')
    assert read_events(p) == [{"kind": "start"}]


def test_clean_keeps_finite_values():
    assert clean([1.0, (2, 3)]) == [1.0, [2, 3]]
