"""Hostile run folders: a FIFO, a /dev/zero symlink, a 1 GiB sparse passport, deep JSON, non-UTF-8 bytes and
wrong types beside a good run; every verb lists the good one and marks the others damaged, fast and small.

docs/spec.md section 18 ("hostile run folders").
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
import tracemalloc
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import trainmeter as tm
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runs import runs_table, summarise_log

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")

TIME_BOUND_S = 2.0
PEAK_BOUND_BYTES = 50 * 1024 * 1024


def _good_run(root: Path, name: str) -> Path:
    clock = FakeClock(100.0)
    m = make_monitor(make_options(run_dir=root, name=name, interval_s=1.0), clock=clock, text=False, probes=False,
                     extensions=[]).start()
    for _ in range(5):
        tm.emit(train_loss=2.0)
        clock.advance(1.0)
        m.on_step(10)
    m.finish("completed")
    return m.run_dir


def _folder(root: Path, name: str, source: Path | None = None) -> Path:
    folder = root / f"20260101T0000{len(list(root.iterdir())):02d}Z-{name}"
    if source is not None:
        shutil.copytree(source, folder)
    else:
        folder.mkdir()
    return folder


@pytest.fixture
def hostile_root(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """A run root: one good run and one damaged folder per fault, named for it."""
    root = tmp_path / "runs"
    root.mkdir()
    good = _good_run(root, "good")
    bad: dict[str, Path] = {}
    f = bad["fifo_passport"] = _folder(root, "fifo_passport")
    os.mkfifo(f / "passport.json")
    f = bad["fifo_log"] = _folder(root, "fifo_log")
    os.mkfifo(f / "events.jsonl")
    f = bad["zero_log"] = _folder(root, "zero_log")
    os.symlink("/dev/zero", f / "events.jsonl")
    f = bad["huge_passport"] = _folder(root, "huge_passport", good)
    with (f / "passport.json").open("wb") as out:
        out.truncate(1024 ** 3)  # sparse: 1 GiB of NUL bytes
    f = bad["deep_passport"] = _folder(root, "deep_passport", good)
    (f / "passport.json").write_text("[" * 200_000 + "]" * 200_000)
    f = bad["non_utf8_log"] = _folder(root, "non_utf8_log", good)
    (f / "passport.json").unlink()
    with (f / "events.jsonl").open("ab") as out:
        out.write(b'{"kind": "series", "name": "\xff\xfe", "x": "step", "step": [9], "t_us": [1], "value": [1]}\n')
        out.write(b'{"kind": "series", "name": "\\ud800bad", "x": "step", "step": [9], "t_us": [1], "value": [1]}\n')
    f = bad["wrong_passport"] = _folder(root, "wrong_passport", good)
    (f / "passport.json").write_text(json.dumps({"name": 5, "status": ["x"], "steps": "many", "series": [1, 2]}))
    f = bad["wrong_dashboard"] = _folder(root, "wrong_dashboard", good)
    (f / "dashboard.json").write_text(json.dumps({"tiles": "x", "charts": 5, "panels": {"a": 1}}))
    f = bad["wrong_records"] = _folder(root, "wrong_records", good)
    (f / "passport.json").unlink()
    with (f / "events.jsonl").open("a") as out:
        out.write(json.dumps({"kind": "series", "name": "train_loss", "x": "step", "step": "abc", "value": 5}) + "\n")
        out.write(json.dumps({"kind": "interval", "step": "x", "tokens": [1], "phases_s": 3}) + "\n")
        out.write(json.dumps({"kind": "steps", "step": [1.5], "t_us": None, "value": ["a"]}) + "\n")
    return root, good, bad


def _bounded(fn: Any) -> Any:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with redirect_stdout(io.StringIO()):
            out = fn()
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < TIME_BOUND_S, f"took {elapsed:.2f} s"
    assert peak < PEAK_BOUND_BYTES, f"peak {peak / 2 ** 20:.1f} MiB"
    return out


@pytest.mark.timeout(60)
def test_runs_lists_the_good_run_and_marks_each_hostile_folder_damaged(hostile_root):
    root, good, bad = hostile_root
    found = _bounded(lambda: tm.runs(root))
    by_dir = {r.dir: r for r in found}
    assert by_dir[good].status == "completed" and by_dir[good].damaged is None
    for fault in ("fifo_passport", "fifo_log", "zero_log", "huge_passport", "deep_passport", "wrong_passport"):
        run = by_dir[bad[fault]]
        assert run.status == "damaged" and run.damaged, fault
    assert "FIFO" in by_dir[bad["fifo_passport"]].damaged
    assert "symlink out of its run folder" in by_dir[bad["zero_log"]].damaged
    assert "is 1.0 GiB, over the 64.0 MiB" in by_dir[bad["huge_passport"]].damaged
    assert "nested too deep" in by_dir[bad["deep_passport"]].damaged
    assert "'name' holds int 5, expected a string" in by_dir[bad["wrong_passport"]].damaged
    # a log with one non-UTF-8 line keeps its other records: killed-run figures, the bad line said
    non_utf8 = by_dir[bad["non_utf8_log"]]
    assert non_utf8.passport["steps"] == 5 and any("2 unreadable lines" in w for w in non_utf8.passport["warnings"])


@pytest.mark.timeout(60)
def test_the_runs_table_and_the_line_magic_say_damaged_why(hostile_root, ip):
    root, good, bad = hostile_root
    table = _bounded(lambda: runs_table(root, limit=None))
    rows = {r.path.rsplit("/", 1)[-1]: r for r in table.rows}
    assert rows[good.name].status == "completed"
    for fault in ("fifo_passport", "fifo_log", "zero_log", "huge_passport", "deep_passport", "wrong_passport"):
        assert rows[bad[fault].name].status.startswith("damaged: "), (fault, rows[bad[fault].name])
    out = io.StringIO()
    with redirect_stdout(out):
        shown = ip.run_line_magic("trainmeter", f"runs --all --dir {root}")
    text = out.getvalue() + (shown.text() if shown is not None else "")
    assert "good" in text and text.count("damaged: ") >= 6


@pytest.mark.timeout(60)
def test_load_display_and_to_pandas_never_raise_and_stay_bounded(hostile_root):
    pytest.importorskip("pandas")
    root, good, bad = hostile_root
    for folder in [good, *bad.values()]:
        run = _bounded(lambda f=folder: tm.load(f))
        _bounded(lambda r=run: tm.display(r))  # headless: the text summary
        frames = _bounded(lambda r=run: r.to_pandas())
        if folder == good:
            assert len(frames.series) == 5 and not frames.notes
    wrong = tm.load(bad["wrong_records"]).to_pandas()
    assert any("wrong types" in n for n in wrong.notes) and len(wrong.series) == 5
    fifo = tm.load(bad["fifo_log"]).to_pandas()
    assert any("FIFO" in n for n in fifo.notes) and len(fifo.series) == 0


@pytest.mark.timeout(60)
def test_replay_of_a_damaged_run_shows_why_and_a_wrong_dashboard_is_ignored(hostile_root):
    from trainmeter.widget.show import replay

    _, good, bad = hostile_root
    state, columns, _ = replay(bad["deep_passport"])
    assert state["status"] == "unfinished" and any("nested too deep" in w for w in state["warnings"])
    assert any(c.name == "train_loss" for c in columns)  # its log still replays
    state, _, _ = replay(bad["wrong_dashboard"])
    assert state["status"] == "completed"


@pytest.mark.timeout(60)
def test_compare_draws_the_good_run_beside_the_damaged_ones(hostile_root):
    pytest.importorskip("bqplot")
    root, good, bad = hostile_root
    import bqplot  # noqa: F401  (imported before the bound: its import is not the reader's cost)
    import ipywidgets  # noqa: F401

    box = _bounded(lambda: tm.compare(root=root, last=100, x="step"))
    statuses = [row["status"] for row in box.rows]
    assert len(statuses) == 1 + len(bad) and statuses[-1] == "completed"  # the good run is the newest
    assert statuses.count("damaged") >= 6
    good_line = [ln for ln in box.lines["train_loss"] if ln.run == box.rows[-1]["run"]]
    assert good_line and len(good_line[0].x) == 5


def test_a_long_log_is_summarised_from_a_bounded_head_and_its_tail(tmp_path):
    path = tmp_path / "events.jsonl"
    lines = [json.dumps({"kind": "start", "name": "long", "started_at": "2026-01-01T00:00:00+00:00"})]
    lines += [json.dumps({"kind": "series", "name": "train_loss", "x": "step", "step": [i], "t_us": [i],
                          "value": [1.0]}) for i in range(20_000)]
    lines += [json.dumps({"kind": "interval", "step": 20_000, "tokens": 7, "elapsed_s": 9.0})]
    path.write_text("\n".join(lines) + "\n")
    summary = summarise_log(path, max_bytes=64 * 1024)
    assert summary["steps"] == 20_000 and summary["tokens"] == 7 and summary["elapsed_s"] == 9.0
    assert any("series figures are from its first 64.0 KiB" in w for w in summary["warnings"])
    assert summary["series"]["train_loss"]["count"] < 20_000  # only the head's points
