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


def test_a_failed_append_is_cut_back_to_whole_lines_and_the_next_one_lands_clean(tmp_path, monkeypatch):
    import errno

    import pytest

    from trainmeter.record import runlog

    log = RunLog(tmp_path / "events.jsonl")
    log.write("start")
    log.flush()
    real = runlog._write_bytes

    def short_then_full(fd, data):
        real(fd, data[:5])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runlog, "_write_bytes", short_then_full)
    log.write("interval", step=1)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.setattr(runlog, "_write_bytes", real)
    log.write("interval", step=2)
    log.close()
    assert [e["kind"] for e in read_events(tmp_path / "events.jsonl")] == ["start", "interval"]
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 2


def test_write_file_atomic_leaves_the_old_file_and_no_temporary_on_failure(tmp_path, monkeypatch):
    import errno

    import pytest

    from trainmeter.record import runlog

    target = tmp_path / "passport.json"
    runlog.write_file_atomic(target, "old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runlog, "_write_bytes", full)
    with pytest.raises(OSError):
        runlog.write_file_atomic(target, "new")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["passport.json"]


def test_an_abandoned_log_closes_its_descriptor_and_writes_nothing_more(tmp_path):
    import os as _os

    import pytest

    log = RunLog(tmp_path / "events.jsonl")
    log.write("start", name="x")
    log.flush()
    fd = log._fd
    log.write("interval", step=1)
    log.abandon()
    log.write("interval", step=2)
    log.flush()
    with pytest.raises(OSError):
        _os.fstat(fd)
    assert (tmp_path / "events.jsonl").read_text().count("\n") == 1
