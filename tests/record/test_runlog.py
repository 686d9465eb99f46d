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


def _documents():
    nan, inf = float("nan"), float("inf")
    return [
        {},
        {"a": 1, "b": [1.5, -0.0, 2**70, None, "x"], "c": {"d": (1, 2), "e": {"f": "é\n\"true\":"}}},
        {"loss": nan, "peaks": [inf, -inf, 1.0], "ok": {"x": nan}},  # non-finite: null, as clean() makes it
        {"by_device": {0: "cpu", 1.5: "half"}, "flags": {True: 1, None: 2}},  # keys clean() spells with str()
        {3: "a non-string top-level key"},
    ]


def test_json_lines_parses_to_exactly_the_indented_dump_of_the_cleaned_document():
    from trainmeter.record.runlog import json_lines

    for doc in _documents():
        text = json_lines(doc)
        assert json.loads(text) == json.loads(json.dumps(clean(doc), indent=2)), doc
        assert len(text.splitlines()) == (len(doc) + 2 if doc else 1)  # one top-level key a line


def test_json_lines_uses_only_the_c_encoder(monkeypatch):
    import json.encoder

    from trainmeter.record.runlog import json_lines

    def python_encoder(*args, **kwargs):
        raise AssertionError("json's pure-Python encoder ran")

    monkeypatch.setattr(json.encoder, "_make_iterencode", python_encoder)
    for doc in _documents():
        assert json.loads(json_lines(doc)) == clean(doc)


def test_clean_keeps_what_json_cannot_encode_and_spells_odd_keys():
    marker = object()
    assert clean({"m": [marker, float("nan")], (1, 2): 3}) == {"m": [marker, None], "(1, 2)": 3}
    assert clean({"t": (1, [2.5])}) == {"t": [1, [2.5]]}


def test_json_lines_raises_type_error_for_a_value_json_cannot_encode():
    import pytest

    from trainmeter.record.runlog import json_lines

    with pytest.raises(TypeError):
        json_lines({"m": object()})
