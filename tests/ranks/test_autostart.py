"""A child of a monitored run starts its own rank run as it builds its first optimizer, once armed by the import."""

from __future__ import annotations

import json
import os

import torch

from trainmeter.core import monitor as monitor_module
from trainmeter.ranks import autostart
from trainmeter.ranks.seating import PARENT_ENV, RUN_DIR_ENV, mark_parent_folder


def reset(monkeypatch) -> None:
    for name, value in (("_armed", False), ("_fired", False), ("_handle", None), ("_monitor", None),
                        ("_patches", None)):
        monkeypatch.setattr(autostart, name, value, raising=False)


def test_the_first_step_of_an_armed_child_starts_a_rank_run_that_seats_itself(tmp_path, monkeypatch):
    from torch.optim import optimizer

    reset(monkeypatch)
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(PARENT_ENV, "1")
    mark_parent_folder(tmp_path, 1)  # some other process: the parent
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    pre_hooks = dict(optimizer._global_optimizer_pre_hooks)
    autostart.arm()
    assert autostart._handle is not None and monitor_module.active() is None  # armed; nothing runs yet
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    m = autostart.auto_monitor()
    assert m is not None and m.steps == 3 and not m.text
    autostart.finish_from_exit("completed", None)
    assert monitor_module.active() is None and dict(optimizer._global_optimizer_pre_hooks) == pre_hooks
    (seat,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert seat.name == f"proc-{os.getpid()}"
    passport = json.loads((seat / "passport.json").read_text())
    assert passport["steps"] == 3 and passport["distributed"]["role"] == "rank"


def test_autostart_can_be_turned_off_and_is_off_in_the_parent_itself(tmp_path, monkeypatch):
    reset(monkeypatch)
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(PARENT_ENV, "1")
    mark_parent_folder(tmp_path, 1)
    monkeypatch.setenv(autostart.AUTOSTART_ENV, "0")
    autostart.arm()
    assert not autostart._armed
    monkeypatch.delenv(autostart.AUTOSTART_ENV)
    monkeypatch.setenv(PARENT_ENV, str(os.getpid()))
    autostart.arm()
    assert not autostart._armed


def _armed_child(tmp_path, monkeypatch) -> None:
    reset(monkeypatch)
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(PARENT_ENV, "1")
    mark_parent_folder(tmp_path, 1)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    autostart.arm()


def test_a_rank_started_when_its_optimizer_is_built_counts_step_1s_batch(tmp_path, monkeypatch):
    init = torch.optim.Optimizer.__init__
    _armed_child(tmp_path, monkeypatch)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = autostart.auto_monitor()
    assert m is not None and m.steps == 0  # started as the optimizer was built, before any step
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    assert m.steps == 3 and m.tokens == 3 * 2  # every step's samples, the first one's too
    autostart.finish_from_exit("completed", None)
    assert torch.optim.Optimizer.__init__ is init and monitor_module.active() is None
    (seat,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    passport = json.loads((seat / "passport.json").read_text())
    assert passport["tokens"] == 6 and "first_step" not in passport["series_info"]["tokens_per_step"]
    assert not passport["distributed"].get("notes")


def test_a_tm_monitor_after_the_optimizer_is_built_takes_over_leaving_no_trace(tmp_path, monkeypatch):
    import trainmeter as tm

    (tmp_path / "launch").mkdir()
    _armed_child(tmp_path / "launch", monkeypatch)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert autostart.auto_monitor() is not None
    with tm.monitor(run_dir=tmp_path / "own", interval_s=3600) as m:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert m.steps == 2 and autostart.auto_monitor() is None
    autostart.finish_from_exit("completed", None)
    (seat,) = [p for p in (tmp_path / "launch").iterdir() if p.is_dir()]  # the script's run, seated; no other
    assert json.loads((seat / "passport.json").read_text())["steps"] == 2 and m.run_dir == seat
