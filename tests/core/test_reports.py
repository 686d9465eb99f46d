"""Reports: due at step or emit boundaries, held back by an open phase until it has been open too long."""

from __future__ import annotations

import pytest

from trainmeter.core import reports
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def _started(tmp_path, clock, interval_s=1.0):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=interval_s, widget=False), clock=clock,
                        text=False, probes=False, extensions=[]).start()


def test_a_report_is_due_once_the_interval_has_passed(tmp_path):
    clock = FakeClock(10.0)
    m = _started(tmp_path, clock)
    m.on_step(4)
    assert m.reports == 0
    clock.advance(1.5)
    m.on_step(4)
    assert m.reports == 1 and m.interval.steps == 2
    m.finish("completed")


def test_an_open_phase_holds_reports_back_until_it_has_been_open_for_long(tmp_path):
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock)
    m.enter_phase("eval")
    clock.advance(30.0)
    m.record({"acc": 0.5})
    assert m.reports == 0  # 30 s < max(60 s, 10 intervals)
    clock.advance(31.0)
    with pytest.warns(MonitorWarning, match="phase 'eval' has been open for 61 s"):
        m.record({"acc": 0.6})
    assert m.reports == 1
    m.exit_phase()
    m.finish("completed")


def test_series_keep_at_most_max_pending_points_when_a_reader_lags(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "MAX_PENDING", 5)
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock, interval_s=3600.0)
    m.add_reader()  # a reader that never reads
    for i in range(20):
        m.record({"x": float(i)})
    m._report(False)
    assert m.series["x"].pending <= 5
    m.finish("completed")
