"""Items 3 and 5: a full disk or an unwritable run folder never stops or slows the training.

A write-failing seam (``trainmeter.record.runlog._write_bytes``) plays the full
disk, including a short write that would leave a torn line; a ``--dir`` that
names a file and a folder under /proc play the unwritable run folder.
"""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest

from trainmeter.core import monitor as monitor_module
from trainmeter.core import series_registry as reports_module
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record import runlog
from trainmeter.record.runlog import read_events


class Disk:
    """The write seam: full while ``full`` is set (a short write first, then ENOSPC)."""

    def __init__(self) -> None:
        self.full = False
        self.calls_while_full = 0
        self._real = runlog._write_bytes

    def __call__(self, fd: int, data: bytes) -> int:
        if not self.full:
            return self._real(fd, data)
        self.calls_while_full += 1
        if len(data) > 8 and self.calls_while_full % 2:
            return self._real(fd, data[: len(data) // 2])  # a torn half line reaches the file first
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def disk(monkeypatch):
    d = Disk()
    monkeypatch.setattr(runlog, "_write_bytes", d)
    return d


def _monitor(run_root, clock, out=None):
    return make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="disk"), clock=clock, text=False,
                        probes=False, extensions=[], out=out)


def _train(m, clock, steps, on_step=None):
    for i in range(steps):
        clock.advance(0.5)
        m.on_step(10)
        m.record({"lr": float(i)})
        if on_step is not None:
            on_step(m.steps)


def test_a_disk_full_mid_run_backs_off_keeps_phases_and_writes_everything_when_space_returns(run_root, disk, capsys):
    clock = FakeClock(100.0)
    m = _monitor(run_root, clock).start()

    def weather(step):
        disk.full = 50 <= step < 150

    with pytest.warns(monitor_module.MonitorWarning, match="record is incomplete"):
        _train(m, clock, 200, weather)
    m.finish("completed")
    events = read_events(m.run_dir / "events.jsonl")
    raw = (m.run_dir / "events.jsonl").read_text().splitlines()
    assert len(raw) == len(events)  # no torn line anywhere
    steps = [s for e in events if e["kind"] == "steps" for s in e["step"]]
    assert steps == list(range(1, 201))  # every point once: none lost, none duplicated
    (gap,) = [e for e in events if e["kind"] == "gap"]
    assert 50 <= gap["from_step"] <= 52 and gap["dropped_points"] == 0 and "No space left" in gap["error"]
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["phases_s"]["train"] == pytest.approx(100.0, abs=1.0)  # the phase clock kept advancing
    # 50 s full, a report due every 1 s: back-off 5, 10, 20 s -> a handful of tries, not 50 (nor one per step)
    failed = passport["record"]["failed_writes"]
    assert passport["record"]["complete"] is False and 0 < failed <= 5
    assert disk.calls_while_full == 2 * failed  # each try: a short write (cut back), then ENOSPC
    assert "Record incomplete" in (m.run_dir / "passport.md").read_text()
    assert "record incomplete" in capsys.readouterr().out


@pytest.mark.parametrize("full_from", ["start", "step 1"])
def test_a_disk_full_to_the_end_says_no_passport_and_leaves_no_temporary_file(run_root, disk, capsys, full_from):
    clock = FakeClock(100.0)
    m = _monitor(run_root, clock)
    with pytest.warns(monitor_module.MonitorWarning):
        disk.full = full_from == "start"
        m.start()
        disk.full = True
        _train(m, clock, 100)
        m.finish("completed")
    assert active() is None and m.steps == 100
    assert sorted(p.name for p in m.run_dir.iterdir()) == ["events.jsonl"]
    line = capsys.readouterr().out
    assert "passport NOT written" in line and "No space left" in line and "passport in" not in line
    assert all(json.loads(raw) for raw in (m.run_dir / "events.jsonl").read_text().splitlines())
    assert disk.calls_while_full <= 2 * 8  # 50 s of reports every 1 s: back-off tries plus the final three


def test_points_pending_while_the_disk_is_full_are_bounded_and_the_dropped_ones_counted(run_root, disk, monkeypatch):
    monkeypatch.setattr(reports_module, "MAX_PENDING", 20)
    clock = FakeClock(100.0)
    m = _monitor(run_root, clock).start()
    with pytest.warns(monitor_module.MonitorWarning):
        _train(m, clock, 100, lambda step: setattr(disk, "full", 10 <= step < 90))
        assert max(s.pending for s in (m.step_series, *m.series.values())) <= 20 + 2
        m.finish("completed")
    (gap,) = [e for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "gap"]
    assert gap["dropped_points"] > 0
    assert json.loads((m.run_dir / "passport.json").read_text())["record"]["gaps"][0]["dropped_points"] > 0


def test_a_dir_naming_a_file_warns_and_the_run_goes_on_in_memory(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    clock = FakeClock(100.0)
    m = _monitor(blocker / "runs", clock)
    with pytest.warns(monitor_module.MonitorWarning, match="cannot write the run folder"):
        m.start()
        _train(m, clock, 30)
        m.finish("completed")
    assert m.steps == 30 and m.series["lr"].stats().count == 30 and active() is None
    assert "passport NOT written" in capsys.readouterr().out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_read_only_run_root_warns_and_the_run_goes_on(capsys):
    clock = FakeClock(100.0)
    m = _monitor("/proc/trainmeter-runs", clock)
    with pytest.warns(monitor_module.MonitorWarning, match="cannot write the run folder"):
        m.start()
        _train(m, clock, 5)
        m.finish("completed")
    assert m.steps == 5 and active() is None


def test_a_run_folder_that_becomes_writable_gets_the_whole_record(tmp_path):
    blocker = tmp_path / "later"
    blocker.write_text("in the way")
    clock = FakeClock(100.0)
    m = _monitor(blocker, clock)
    with pytest.warns(monitor_module.MonitorWarning):
        m.start()
        _train(m, clock, 40, lambda step: blocker.unlink() if step == 20 else None)
        m.finish("completed")
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["steps"] == 40 and passport["record"]["complete"] is False
    steps = [s for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "steps" for s in e["step"]]
    assert steps == list(range(1, 41))


def test_the_run_folder_is_absolute_so_chdir_in_the_cell_does_not_lose_the_passport(in_tmp, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    clock = FakeClock(100.0)
    m = _monitor("relative-runs", clock).start()
    os.chdir(tmp_path / "elsewhere")
    _train(m, clock, 5)
    m.finish("completed")
    assert m.run_dir.is_absolute() and m.run_dir.parent == in_tmp / "relative-runs"
    assert (m.run_dir / "passport.json").exists()


def test_a_cell_with_an_unwritable_dir_still_runs(ip, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    ip.user_ns["ran"] = False
    with pytest.warns(monitor_module.MonitorWarning, match="cannot write the run folder"):
        ip.run_cell_magic("trainmeter", f"--dir {blocker} --no-widget --name ro", "ran = True\n")
    assert ip.user_ns["ran"] is True and active() is None
    assert "passport NOT written" in capsys.readouterr().out


def test_a_passport_kept_in_memory_is_written_by_save_once_the_disk_accepts_it(run_root, disk, capsys):
    import trainmeter as tm

    clock = FakeClock(100.0)
    m = _monitor(run_root, clock).start()
    disk.full = True
    with pytest.warns(monitor_module.MonitorWarning):
        _train(m, clock, 30)
        m.finish("completed")
        assert tm.save() is None  # still full: the run stays waiting
    assert not (m.run_dir / "passport.json").exists()
    disk.full = False
    assert tm.save() == m.run_dir
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["steps"] == 30 and passport["status"] == "completed"
    events = read_events(m.run_dir / "events.jsonl")
    assert [e["kind"] for e in events].count("start") == 1
    assert [s for e in events if e["kind"] == "steps" for s in e["step"]] == list(range(1, 31))
    assert tm.save() is None  # nothing waiting any more


def test_the_next_run_writes_a_waiting_passport_first(run_root, disk, capsys):
    clock = FakeClock(100.0)
    first = _monitor(run_root, clock).start()
    disk.full = True
    with pytest.warns(monitor_module.MonitorWarning):
        _train(first, clock, 5)
        first.finish("completed")
    disk.full = False
    second = _monitor(run_root, clock).start()
    assert (first.run_dir / "passport.json").exists()
    second.finish("completed")


def test_after_the_disk_recovers_the_record_summary_says_every_point_was_written(run_root, disk):
    clock = FakeClock(100.0)
    m = _monitor(run_root, clock).start()

    def weather(step):
        disk.full = 4 <= step < 80

    with pytest.warns(monitor_module.MonitorWarning):
        _train(m, clock, 120, weather)
    m.finish("completed")
    record = json.loads((m.run_dir / "passport.json").read_text())["record"]
    assert record["points_complete"] is True and record["log"] == "events.jsonl"
    assert "misses points" not in record["summary"] and "every point was written" in record["summary"]
    assert "misses points" not in (m.run_dir / "passport.md").read_text()


def test_a_full_disk_leaves_no_temporary_curves_or_dashboard_file(tmp_path, disk):
    from trainmeter.comparison.extension import write_curves
    from trainmeter.widget.view_model import save_dashboard

    disk.full = True
    with pytest.raises(OSError):
        write_curves(tmp_path, {"series": {}, "reports": {}, "mfu": {}})
    save_dashboard(tmp_path, {"name": "x"})  # never raises: the replay loses its extras
    assert list(tmp_path.iterdir()) == []


def test_the_record_holds_no_absolute_path(run_root):
    clock = FakeClock(100.0)
    m = _monitor(run_root, clock).start()
    _train(m, clock, 3)
    m.finish("completed")
    from trainmeter.widget.view_model import build_state, facts_from_monitor, save_dashboard

    save_dashboard(m.run_dir, build_state(facts_from_monitor(m.context)))
    root = str(run_root.resolve())
    for name in ("passport.json", "events.jsonl", "dashboard.json", "passport.md"):
        assert root not in (m.run_dir / name).read_text(), name
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["options"]["run_root"] == ".." and passport["record"]["log"] == "events.jsonl"


def test_a_run_with_every_default_wing_holds_no_absolute_path_in_its_record(run_root):
    import torch

    import trainmeter as tm

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=0.1) as m:
        for _ in range(5):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
        tm.checkpoint()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    root = str(run_root.resolve())
    for name in ("passport.json", "events.jsonl", "passport.md"):
        assert root not in (m.run_dir / name).read_text(), name
