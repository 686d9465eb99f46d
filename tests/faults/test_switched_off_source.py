"""Issue 40 item 8(b): a step source switched off by TRAINMETER_DISABLE that leaves the run blind says so once."""

from __future__ import annotations

import json

import pytest

import trainmeter as tm
from tests.conftest import tiny_model_and_data, train_steps
from trainmeter.core.faults import MonitorWarning


def test_a_run_blinded_by_a_switched_off_step_hook_warns_once_naming_the_switch(run_root, monkeypatch):
    monkeypatch.setenv("TRAINMETER_DISABLE", "step-hooks")
    model, opt, batches = tiny_model_and_data()
    with pytest.warns(MonitorWarning, match="switched off step-hooks") as seen:
        with tm.monitor(run_dir=run_root, name="blind") as m:
            train_steps(model, opt, batches[:4])
    assert m.steps == 0
    assert sum("switched off step-hooks" in str(w.message) for w in seen) == 1
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert [w for w in passport["warnings"] if "TRAINMETER_DISABLE switched off step-hooks" in w]


def test_a_switched_off_source_is_not_mentioned_when_the_steps_were_counted_another_way(run_root, monkeypatch):
    monkeypatch.setenv("TRAINMETER_DISABLE", "step-hooks")
    with tm.monitor(run_dir=run_root, name="counted") as m:
        for _ in range(3):
            tm.step()
    assert m.steps == 3
    assert not [w for w in m.warnings if "switched off" in w]
