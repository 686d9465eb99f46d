"""The runs table of ``%trainmeter runs``: fake run folders, with and without a passport."""

from __future__ import annotations

import json
from pathlib import Path

from trainmeter.record.runs import runs_table
from trainmeter.record.runs_table import RUN_COLUMNS, log_tail_summary


def _passport_run(root: Path, stamp: str, name: str, **extra) -> Path:
    folder = root / f"{stamp}-{name}"
    folder.mkdir(parents=True)
    passport = {"name": name, "status": "completed", "started_at": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T"
                f"{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}+00:00", "elapsed_s": 3725.0, "steps": 1500,
                "tokens": 1_180_000, "token_unit": "tokens", "series": {"train_loss": {"last": 2.3456}}, **extra}
    (folder / "passport.json").write_text(json.dumps(passport))
    (folder / "events.jsonl").write_text("")
    return folder


def _log_only_run(root: Path, stamp: str, name: str, *, torn: bool = False, filler: int = 0) -> Path:
    folder = root / f"{stamp}-{name}"
    folder.mkdir(parents=True)
    lines = [{"kind": "start", "name": name, "started_at": "2026-03-04T05:06:07+00:00", "options": {}}]
    lines += [{"kind": "series", "name": "noise", "x": "step", "step": [i], "value": [0.5]} for i in range(filler)]
    lines += [{"kind": "series", "name": "train_loss", "x": "step", "step": [40], "value": [3.25]},
              {"kind": "interval", "step": 40, "tokens": 20480, "token_unit": "tokens", "elapsed_s": 65.0}]
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if torn:
        text += '{"kind": "interval", "step": 41, "tok'  # killed mid-write
    (folder / "events.jsonl").write_text(text)
    return folder


def test_rows_are_newest_first_with_dated_utc_start_formatted_figures_and_path(tmp_path):
    _passport_run(tmp_path, "20260101T000000Z", "old")
    _passport_run(tmp_path, "20260102T101500Z", "new")
    table = runs_table(tmp_path)
    assert [r.name for r in table.rows] == ["new", "old"]
    row = table.rows[0]
    assert row.started == "2026-01-02 10:15" and row.status == "completed"
    assert row.duration == "1:02:05" and row.steps == "1,500" and row.tokens == "1.2M" and row.last_loss == "2.346"
    assert row.path.endswith("20260102T101500Z-new") and not row.from_log


def test_a_run_without_a_passport_is_read_from_its_log_and_marked_killed_once_its_log_fell_silent(tmp_path):
    _log_only_run(tmp_path, "20260304T050607Z", "killed")
    (row,) = runs_table(tmp_path).rows
    assert row.from_log and row.status == "killed (last seen 05:07:12) *"  # start + the last report's 65 s
    assert (row.started, row.steps, row.tokens, row.last_loss, row.duration) == (
        "2026-03-04 05:06", "40", "20.5k", "3.25", "0:01:05")
    assert "no passport" in runs_table(tmp_path).text()


def test_a_torn_last_line_is_skipped_and_the_last_whole_report_shown(tmp_path):
    _log_only_run(tmp_path, "20260304T050607Z", "torn", torn=True)
    (row,) = runs_table(tmp_path).rows
    assert row.steps == "40" and row.name == "torn"


def test_the_log_is_read_boundedly_head_and_tail_only(tmp_path):
    folder = _log_only_run(tmp_path, "20260304T050607Z", "big", filler=20_000)
    assert (folder / "events.jsonl").stat().st_size > 1_000_000
    summary = log_tail_summary(folder / "events.jsonl", head_bytes=4096, tail_bytes=4096)
    assert summary["name"] == "big" and summary["steps"] == 40 and summary["last_loss"] == 3.25
    tiny = log_tail_summary(folder / "events.jsonl", head_bytes=4096, tail_bytes=64)  # tail cut mid-record
    assert tiny["steps"] is None and tiny["status"] == "unfinished"


def test_only_the_last_n_are_listed_and_the_rest_counted(tmp_path):
    for day in range(1, 26):
        _passport_run(tmp_path, f"202601{day:02d}T000000Z", f"r{day}")
    table = runs_table(tmp_path)
    assert len(table.rows) == 20 and table.more == 5 and table.rows[0].name == "r25"
    assert "+5 more" in table.text() and "+5 more" in table._repr_html_()
    assert len(runs_table(tmp_path, limit=None).rows) == 25


def test_html_table_has_every_column_and_escapes_names(tmp_path):
    folder = _passport_run(tmp_path, "20260101T000000Z", "x")
    (folder / "passport.json").write_text(json.dumps({"name": "<b>x</b>", "status": "completed"}))
    html = runs_table(tmp_path)._repr_html_()
    assert html.startswith('<table class="trainmeter-runs">')
    for column in RUN_COLUMNS:
        assert f">{column}</th>" in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_text_table_aligns_columns_under_the_header(tmp_path):
    _passport_run(tmp_path, "20260101T000000Z", "a")
    _passport_run(tmp_path, "20260102T000000Z", "a-much-longer-name")
    lines = runs_table(tmp_path).text().splitlines()
    col = lines[0].index("status")
    assert all(line[col:].startswith("completed") for line in lines[1:3])


def test_an_empty_or_missing_root_says_so(tmp_path):
    assert runs_table(tmp_path / "nowhere").text().startswith("no saved runs under")
    assert runs_table(tmp_path).rows == ()
