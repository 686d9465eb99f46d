"""A temp file then a rename (the atomic-save idiom of a hand loop) is one checkpoint of the final file."""

from __future__ import annotations

import io
import json
import os

import pytest
import torch

from tests.timesplit.test_extension import Delay, _monitor
from trainmeter.core.clock import FakeClock
from trainmeter.timesplit.extension import TimeSplit

SAVE_S = 0.5  # fake seconds pickling the state
RENAME_S = 0.25  # fake seconds in each rename


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


@pytest.fixture
def clock(monkeypatch):
    """A fake clock that each ``os.replace``/``os.rename`` advances (patched before the run: the run wraps them)."""
    clock = FakeClock(100.0)
    for name in ("replace", "rename"):
        real = getattr(os, name)

        def slow(src, dst, *args, _real=real, **kwargs):
            clock.advance(RENAME_S)
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, name, slow)
    return clock


def test_a_temp_file_renamed_to_its_final_name_is_one_checkpoint_of_the_final_file(tmp_path, clock):
    out = tmp_path / "ckpts"
    out.mkdir()
    renames = (os.replace, os.rename)
    m = _monitor(tmp_path / "runs", clock, TimeSplit()).start()
    torch.save({"w": torch.ones(64), "delay": Delay(clock, SAVE_S)}, str(out / "a.pt.tmp"))
    os.replace(str(out / "a.pt.tmp"), str(out / "a.pt"))
    with open(out / "b.tmp", "wb") as f:  # an open file, then pathlib's rename (os.rename underneath)
        torch.save({"w": torch.ones(128), "delay": Delay(clock, SAVE_S)}, f)
    (out / "b.tmp").rename(out / "b.pt")
    m.finish("completed")
    p = _passport(m)
    assert [(r["path"], r["bytes"], r["source"]) for r in p["checkpoints"]] == [
        (str(out / "a.pt"), os.path.getsize(out / "a.pt"), "torch.save"),
        (str(out / "b.pt"), os.path.getsize(out / "b.pt"), "torch.save")]
    assert [r["seconds"] for r in p["checkpoints"]] == pytest.approx([SAVE_S + RENAME_S] * 2)
    assert p["time"]["checkpoint_saves"] == 2 and p["phases_s"]["checkpoint"] == pytest.approx(2 * (SAVE_S + RENAME_S))
    assert {"os.replace", "os.rename"} <= set(p["time"]["patched"])
    assert (os.replace, os.rename) == renames  # put back at the run's end


def test_a_rename_of_another_file_or_after_the_next_step_changes_nothing(tmp_path, clock):
    out = tmp_path / "ckpts"
    out.mkdir()
    (out / "log.tmp").write_text("x")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = _monitor(tmp_path / "runs", clock, TimeSplit()).start()
    torch.save({"delay": Delay(clock, SAVE_S)}, str(out / "a.pt"))
    os.replace(out / "log.tmp", out / "log.txt")  # not the file the save wrote
    with pytest.raises(FileNotFoundError):
        os.rename(out / "missing", out / "x")
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    size = os.path.getsize(out / "a.pt")
    os.rename(out / "a.pt", out / "archived.pt")  # the file the save wrote, after the next step: another matter
    torch.save({"delay": Delay(clock, SAVE_S)}, io.BytesIO())
    m.finish("completed")
    p = _passport(m)
    first, stream = p["checkpoints"]
    assert (first["path"], first["bytes"], first["seconds"]) == (str(out / "a.pt"), size, pytest.approx(SAVE_S))
    assert p["phases_s"]["checkpoint"] == pytest.approx(2 * SAVE_S)  # the renames are not checkpoint time
    assert stream["path"] is None and "open()" in stream["note"]  # a stream, no file: said why
    assert f"a stream, no file: {stream['note']}" in (m.run_dir / "passport.md").read_text()


def test_the_rename_patch_is_switched_off_by_its_key(tmp_path, clock, monkeypatch):
    monkeypatch.setenv("TRAINMETER_DISABLE", "checkpoint-rename")
    renames = (os.replace, os.rename)
    m = _monitor(tmp_path / "runs", clock, TimeSplit()).start()
    assert (os.replace, os.rename) == renames
    torch.save({"delay": Delay(clock, SAVE_S)}, str(tmp_path / "a.tmp"))
    os.replace(tmp_path / "a.tmp", tmp_path / "a.pt")
    m.finish("completed")
    [record] = _passport(m)["checkpoints"]
    assert record["path"] == str(tmp_path / "a.tmp") and record["seconds"] == pytest.approx(SAVE_S)


def test_the_run_log_says_each_checkpoint_as_it_is_recorded_and_a_rename_replaces_the_temp_files_record(tmp_path,
                                                                                                       clock):
    from trainmeter.record.runs import summarise_log

    out = tmp_path / "ckpts"
    out.mkdir()
    m = _monitor(tmp_path / "runs", clock, TimeSplit()).start()
    torch.save({"w": torch.ones(64)}, str(out / "a.pt.tmp"))
    logged = [json.loads(line) for line in (m.run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["path"], e["step"]) for e in logged if e["kind"] == "checkpoint"] == [(str(out / "a.pt.tmp"), 0)]
    os.replace(str(out / "a.pt.tmp"), str(out / "a.pt"))
    size = os.path.getsize(out / "a.pt")
    summary = summarise_log(m.run_dir / "events.jsonl")  # as a killed run is read: no passport
    assert summary["checkpoints"] == [{"path": str(out / "a.pt"), "step": 0, "bytes": size, "source": "torch.save"}]
    m.finish("completed")
