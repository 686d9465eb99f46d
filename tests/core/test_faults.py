"""Faults of a run: warned once per key, capped, escaped, and a guarded call never raises."""

from __future__ import annotations

import io

import pytest

from trainmeter.core import faults
from trainmeter.core.clock import FakeClock
from trainmeter.core.faults import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def _monitor(tmp_path, **kwargs):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), clock=FakeClock(),
                        text=False, probes=False, extensions=[], **kwargs)


def test_a_key_warns_once_and_its_message_is_kept_escaped(tmp_path):
    m = _monitor(tmp_path)
    with pytest.warns(MonitorWarning, match="disk"):
        m.warn_once("k", "disk\x1b[2J full")
        m.warn_once("k", "disk full again")
    assert m.warnings == ["disk\\x1b[2J full"]


def test_past_the_cap_warnings_are_only_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "MAX_WARNINGS", 2)
    m = _monitor(tmp_path)
    with pytest.warns(MonitorWarning):
        for key in "abcd":
            m.warn_once(key, f"fault {key}")
    assert m.warnings == ["fault a", "fault b"] and m.context.warnings_suppressed == 2


def test_a_guarded_call_returns_its_value_or_none_with_one_warning(tmp_path):
    m = _monitor(tmp_path)
    assert m.guard("sum", sum, [1, 2]) == 3
    with pytest.warns(MonitorWarning, match="part failed and was disabled"):
        assert m.guard("part", lambda: 1 / 0) is None
    assert len(m.warnings) == 1


def test_a_text_line_that_cannot_be_printed_is_dropped_quietly_and_others_are_escaped(tmp_path):
    class Broken(io.StringIO):
        def write(self, s):
            raise OSError("closed")

    m = _monitor(tmp_path, out=Broken())
    m.faults.say("a line")  # no exception
    out = io.StringIO()
    m.faults.new_run(out)
    m.faults.say("bell\x07 here")
    assert out.getvalue() == "bell\\x07 here\n"
