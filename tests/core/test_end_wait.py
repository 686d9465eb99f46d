"""The run's end waits at most one bound in all, names the wing it gave up on, and leaves no thread of ours
running (docs/spec.md section 20, "The end's bound"); a wing that holds the training thread is disabled."""

from __future__ import annotations

import json
import threading
import time

import pytest

from trainmeter.api import run_monitored
from trainmeter.core import lifecycle
from trainmeter.core.clock import FakeClock
from trainmeter.core.extension import ExtensionBase
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options

BOUND_S = 2.0
SLACK_S = 6.0  # our own joins (0.5 s each) and a busy machine


class Blocker(ExtensionBase):
    """A wing whose report work (``on_report`` on the worker, or its passport section) waits for the test."""

    name = "blocker"
    report_on_worker = True

    def __init__(self, where: str) -> None:
        self.where = where
        self.release = threading.Event()
        self.reports = 0

    def start(self, context):
        self.context = context

    def on_report(self, report):
        self.reports += 1
        if self.where == "report" and not report.final and self.reports == 2:
            self.release.wait(120)
        if self.where == "job" and self.reports == 1:
            self.context.worker.submit(self.name, lambda: self.release.wait(120))
        return {"reports": self.reports}

    def passport_section(self):
        if self.where == "passport":
            self.release.wait(120)
        return {"blocked": self.where}


def _ours() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("trainmeter")]


def _run_folder_files(root) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("where", "job"), [("report", "on_report in the 'report' job"),
                                            ("passport", "passport_section in the 'passport' job"),
                                            ("job", "the 'blocker' job")])
def test_a_wing_blocking_on_the_report_worker_is_given_up_on_within_the_bound_and_named(
        tmp_path, monkeypatch, where, job):
    monkeypatch.setattr(lifecycle, "END_WAIT_S", BOUND_S)
    wing = Blocker(where)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, name="blocked"), text=False,
                     probes=False, extensions=[wing])
    with pytest.warns(MonitorWarning) as said:
        with run_monitored(m):
            m.on_step(8, loss_value=1.0)
            m.report_now()  # the first report runs inline
            m.on_step(8, loss_value=0.5)
            m.report_now()  # the second is the worker's job
            t0 = time.monotonic()
    exit_s = time.monotonic() - t0
    try:
        gave_up = [str(w.message) for w in said if "gave up" in str(w.message)]
        assert exit_s <= BOUND_S + SLACK_S, exit_s
        assert len(gave_up) == 1 and "'blocker'" in gave_up[0] and job in gave_up[0], gave_up
        passport = json.loads((m.run_dir / "passport.json").read_text())
        assert [(g["wing"], g["job"]) for g in passport["end_gave_up"]] == [("blocker", job)]
        assert passport["status"] == "completed" and passport["steps"] == 2
        assert "blocker" not in passport
        before = _run_folder_files(tmp_path)
    finally:
        wing.release.set()
    for t in _ours():
        t.join(5.0)
    assert _ours() == []
    assert _run_folder_files(tmp_path) == before  # the abandoned thread wrote nothing once released


def test_an_end_with_nothing_blocked_gives_up_on_nothing(tmp_path):
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, name="fine"), text=False,
                     probes=False, extensions=[Blocker("nowhere")])
    with run_monitored(m):
        m.on_step(8, loss_value=1.0)
        m.report_now()
        m.on_step(8, loss_value=0.5)
        m.report_now()
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["end_gave_up"] == [] and passport["blocker"] == {"blocked": "nowhere"}
    assert _ours() == []


class Holder(ExtensionBase):
    """A wing whose inline report holds the training thread 45 s of the run's clock."""

    name = "holder"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.reports = 0
        self.stopped = False

    def stop(self):
        self.stopped = True

    def on_report(self, report):
        self.reports += 1
        self.clock.advance(45.0)
        return {}


def test_a_wing_holding_the_training_thread_past_the_bound_is_disabled_and_named_and_still_stopped(tmp_path):
    clock = FakeClock()
    wing = Holder(clock)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, name="held"), clock=clock,
                     text=False, probes=False, extensions=[wing])
    with pytest.warns(MonitorWarning, match=r"extension 'holder' held the training thread 45\.0 s in on_report "
                                            r"\(bound 30 s\) and was disabled"):
        with run_monitored(m):
            m.on_step(8, loss_value=1.0)
            m.report_now()
            m.on_step(8, loss_value=0.5)
            m.report_now()
    assert wing.reports == 1 and wing.stopped  # disabled after its first report, still stopped at the end
