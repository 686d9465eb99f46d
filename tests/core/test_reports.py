"""Reports: due at step or emit boundaries, held back by an open phase until it has been open too long; a steady
report's wing fields and run-log write on the report worker, from the report's snapshot."""

from __future__ import annotations

import json
import threading

import pytest

from trainmeter.core import report_worker, reports
from trainmeter.core.clock import FakeClock
from trainmeter.core.extension import ExtensionBase
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
    import trainmeter.core.series_registry as registry

    monkeypatch.setattr(registry, "MAX_PENDING", 5)
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock, interval_s=3600.0)
    m.add_reader()  # a reader that never reads
    for i in range(20):
        m.record({"x": float(i)})
    m.report_now()
    assert m.series["x"].pending <= 5
    m.finish("completed")


class _Wing(ExtensionBase):
    """A wing that notes where and with what its report events ran."""

    def __init__(self, name: str, on_worker: bool, seen: list) -> None:
        self.name, self.report_on_worker, self.seen = name, on_worker, seen

    def start(self, monitor) -> None:
        self._m = monitor

    def on_report(self, report):
        self.seen.append((self.name, report.steps, threading.current_thread().name, self._m.steps))
        return {"steps": report.steps}

    def stop(self) -> None:
        self.seen.append((self.name, "stop"))


def _threaded(tmp_path, wings):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600.0, widget=False), text=False, probes=False,
                        extensions=wings).start()


def _records(m, kind):
    lines = (m.run_dir / "events.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_a_steady_report_runs_the_worker_wings_and_the_run_log_write_on_the_worker_with_the_reports_snapshot(
        tmp_path):
    seen: list = []
    m = _threaded(tmp_path, [_Wing("inline", False, seen), _Wing("deferred", True, seen)])
    me = threading.current_thread().name
    m.on_step(4)
    m.report_now()  # the first report: all on the training thread
    assert seen == [("inline", 1, me, 1), ("deferred", 1, me, 1)]
    gate = threading.Event()
    m.worker.submit("test-gate", lambda: gate.wait(10))
    m.on_step(4)
    m.report_now()  # queued behind the gate: the training thread went on
    assert seen[2:] == [("inline", 2, me, 2)] and len(_records(m, "interval")) == 1
    m.on_step(4)  # training goes on past the report before the worker writes it
    gate.set()
    assert m.worker.drain(10)
    assert seen[3] == ("deferred", 2, report_worker.THREAD_NAME, 3)
    second = _records(m, "interval")[1]
    assert second["step"] == 2 and second["tokens"] == 8  # the report's snapshot, not the run's step 3
    assert list(second)[-2:] == ["inline", "deferred"]  # the extension order, whoever took the fields
    assert second["inline"] == second["deferred"] == {"steps": 2}
    m.finish("completed")


def test_finish_runs_a_queued_report_job_before_the_wings_stop_and_the_log_ends_with_it_in_order(tmp_path):
    seen: list = []
    m = _threaded(tmp_path, [_Wing("deferred", True, seen)])
    for _ in range(3):
        m.on_step(4)
        m.report_now()
    gate = threading.Event()
    m.worker.submit("test-gate", lambda: gate.wait(10))
    m.on_step(4)
    m.report_now()
    threading.Timer(0.2, gate.set).start()
    m.finish("completed")
    assert [s[:2] for s in seen] == [("deferred", 1), ("deferred", 2), ("deferred", 3), ("deferred", 4),
                                     ("deferred", "stop"), ("deferred", 4)]
    kinds = [r["kind"] for r in map(json.loads, (m.run_dir / "events.jsonl").read_text().splitlines())]
    assert kinds[-1] == "end" and [r["step"] for r in _records(m, "interval")] == [1, 2, 3, 4, 4]
    steps = [s for r in _records(m, "steps") for s in r["step"]]
    assert steps == [1, 2, 3, 4]  # every point once, in order


def test_a_threaded_runs_log_holds_the_records_an_inline_run_writes_though_its_reports_ran_late(tmp_path):
    def run(where, clock):
        m = make_monitor(make_options(run_dir=tmp_path / where, interval_s=3600.0, widget=False), text=False,
                         probes=False, extensions=[_Wing("deferred", True, [])], clock=clock).start()
        gate = threading.Event()
        if m.worker.threaded:  # every steady report waits: the run goes on past it
            m.worker.submit("test-gate", lambda: gate.wait(10))
        for i in range(5):
            m.on_step(4)
            m.record({"x": float(i)})
            m.report_now()
        gate.set()
        m.finish("completed")
        out = []
        for r in map(json.loads, (m.run_dir / "events.jsonl").read_text().splitlines()):
            if r["kind"] in ("steps", "series"):  # a deferred write stops at the report's ends: the same records
                out.append((r["kind"], r["name"], r["step"], r["value"]))
            elif r["kind"] == "interval":
                out.append((r["step"], r["tokens"], r["deferred"], r["throughput"]["window_steps"]))
        return out

    assert run("threaded", None) == run("inline", FakeClock(0.0))


def test_a_report_job_that_raises_warns_once_and_later_reports_run_on_the_training_thread(tmp_path, monkeypatch):
    seen: list = []
    m = _threaded(tmp_path, [_Wing("deferred", True, seen)])
    m.on_step(4)
    m.report_now()
    monkeypatch.setattr(m.registry, "trim", lambda step_series: 1 / 0)
    m.on_step(4)
    with pytest.warns(MonitorWarning, match="report's report work failed"):
        m.report_now()
        assert m.worker.drain(10) and reports.REPORT_JOB in m.worker.disabled
    monkeypatch.undo()
    m.on_step(4)
    m.report_now()
    assert seen[-1] == ("deferred", 3, threading.current_thread().name, 3)
    m.finish("completed")


def test_every_steady_reports_text_line_is_printed_whole_and_in_order_from_the_worker(tmp_path):
    import io

    out = io.StringIO()
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600.0, widget=False), text=True, probes=False,
                     extensions=[], out=out).start()
    gate = threading.Event()
    for r in range(4):
        m.on_step(4)
        m.report_now()
        if r == 0:
            m.worker.submit("test-gate", lambda: gate.wait(10))
    shown = [line for line in out.getvalue().splitlines() if line.startswith("[step")]
    assert len(shown) == 1 and shown[0].startswith("[step 1]")  # the first on the training thread; the rest queued
    gate.set()
    assert m.worker.drain(10)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[step")]
    assert [line.split("]")[0] for line in lines] == ["[step 1", "[step 2", "[step 3", "[step 4"]
    m.finish("completed")
