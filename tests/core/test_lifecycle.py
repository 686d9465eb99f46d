"""A run's lifecycle: one run at a time, finish parts run once, SIGTERM that does not end the process saves."""

from __future__ import annotations

import io
import json

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning, active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def _monitor(tmp_path, name="life", **kwargs):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, name=name), clock=FakeClock(),
                        text=False, probes=False, extensions=[], **kwargs)


def test_a_second_run_is_refused_while_one_is_active_and_the_first_keeps_the_slot(tmp_path):
    first = _monitor(tmp_path, "first").start()
    with pytest.raises(RuntimeError, match=r"a run \('first'\) is already being monitored"):
        _monitor(tmp_path, "second").start()
    assert active() is first
    first.finish("completed")
    assert active() is None


def test_finishing_twice_runs_each_part_once(tmp_path):
    out = io.StringIO()
    m = _monitor(tmp_path, out=out).start()
    m.on_step(4)
    m.finish("completed")
    m.finish("failed")
    assert m.status == "completed"
    assert out.getvalue().count("completed after 1 steps") == 1


def test_a_sigterm_the_program_survives_saves_a_terminated_passport_and_the_run_goes_on(tmp_path):
    m = _monitor(tmp_path).start()
    m.on_step(4)
    with pytest.warns(MonitorWarning, match="SIGTERM at step 1"):
        m._on_terminate(False)
    assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "terminated"
    assert m.status == "running" and active() is m
    m.finish("completed")
    assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "completed"
