"""psutil on the node thread only: a slow or failing memory_info costs training nothing (docs/spec.md section 18)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.host import SteppedNodeSampler
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.host.extension import NodeSampler
from trainmeter.options import make_options
from trainmeter.overhead.extension import Overhead

psutil = pytest.importorskip("psutil")
SLOW_S = 2.0


def _monitor(run_root, clock):
    return make_monitor(make_options(run_dir=run_root, name="slow", interval_s=1), clock=clock, text=False,
                        probes=False, extensions=[Overhead(), NodeSampler(period_s=0.05)])


@pytest.mark.slow
def test_a_two_second_memory_info_adds_nothing_to_training_reports(run_root, monkeypatch):
    calls = threading.Event()

    def slowly(real):
        def slow(self):
            calls.set()
            time.sleep(SLOW_S)
            return real(self)
        return slow

    monkeypatch.setattr(psutil.Process, "memory_info", slowly(psutil.Process.memory_info))
    monkeypatch.setattr(psutil.Process, "threads", slowly(psutil.Process.threads))  # the overhead wing's reading
    clock = FakeClock()
    m = _monitor(run_root, clock).start()
    try:
        assert calls.wait(10)  # the node thread is inside the slow read
        worst_s = 0.0
        for _ in range(3):
            clock.advance(2.0)  # each step is past the interval: a report on the training thread
            t0 = time.perf_counter()
            m.on_step(10)
            worst_s = max(worst_s, time.perf_counter() - t0)
        assert m.reports == 3
        assert worst_s < SLOW_S / 4  # the reports never waited for psutil
        deadline = time.monotonic() + 10
        while m.process_memory.latest[0] is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the node thread's read comes back
        clock.advance(2.0)
        m.on_step(10)
        assert m.memory is not None and m.memory.rss_bytes is not None  # the last RSS the node thread posted
    finally:
        m.finish("completed")


def test_a_failing_memory_info_says_why_once_and_leaves_rss_unknown(run_root, monkeypatch):
    def broken(self):
        raise psutil.AccessDenied(pid=self.pid, msg="hidden /proc")

    monkeypatch.setattr(psutil.Process, "memory_info", broken)
    clock = FakeClock()
    m = make_monitor(make_options(run_dir=run_root, name="broken", interval_s=1), clock=clock, text=False,
                     probes=False, extensions=[SteppedNodeSampler()])
    with pytest.warns(MonitorWarning, match="node reading 'rss' unavailable from here on: AccessDenied"):
        m.start()
    clock.advance(2.0)
    m.on_step(10)
    m.finish("completed")
    assert m.memory is not None and m.memory.rss_bytes is None
    assert sum("'rss'" in w for w in m.warnings) == 1
