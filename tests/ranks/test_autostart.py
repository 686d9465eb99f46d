"""A child of a monitored run starts its own rank run at its first optimizer step, once armed by the import."""

from __future__ import annotations

import json
import os

import torch

from trainmeter.core import monitor as monitor_module
from trainmeter.ranks import autostart
from trainmeter.ranks.launch import PARENT_ENV, RUN_DIR_ENV


def reset(monkeypatch) -> None:
    for name, value in (("_armed", False), ("_fired", False), ("_handle", None), ("_monitor", None)):
        monkeypatch.setattr(autostart, name, value)


def test_the_first_step_of_an_armed_child_starts_a_rank_run_that_seats_itself(tmp_path, monkeypatch):
    from torch.optim import optimizer

    reset(monkeypatch)
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(PARENT_ENV, "1")  # some other process: the parent
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
    monkeypatch.setenv(autostart.AUTOSTART_ENV, "0")
    autostart.arm()
    assert not autostart._armed
    monkeypatch.delenv(autostart.AUTOSTART_ENV)
    monkeypatch.setenv(PARENT_ENV, str(os.getpid()))
    autostart.arm()
    assert not autostart._armed
