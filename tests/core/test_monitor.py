"""Monitor arithmetic with an injected clock: denominators, zero durations, reporting credit."""

import json

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.core.monitor import MonitorWarning, active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events


def _monitor(run_root, clock, syncs=None, interval_s=10.0):
    m = make_monitor(make_options(run_dir=run_root, interval_s=interval_s, name="arith"), clock=clock,
                synchronize=(lambda: syncs.append(clock())) if syncs is not None else None,
                text=False, probes=False)
    return m


def _slow_memory(m, clock, cost_s):
    def sample():
        clock.advance(cost_s)
        return MemoryReading(rss_bytes=1000, rss_peak_bytes=1000)

    m.lifecycle.memory_probe.sample = sample


def test_training_only_and_session_throughput_use_their_own_denominators(run_root):
    clock = FakeClock(100.0)
    syncs: list[float] = []
    m = _monitor(run_root, clock, syncs).start()
    _slow_memory(m, clock, 0.5)
    for _ in range(4):
        clock.advance(1)
        m.on_step(100)
    m.enter_phase("eval")
    clock.advance(3)
    m.exit_phase()
    syncs_before_steps = len(syncs)
    for _ in range(2):
        clock.advance(1)
        m.on_step(100)
    assert len(syncs) == syncs_before_steps  # no sync per step
    clock.advance(1)
    m.on_step(100)  # t = 110: ten seconds since the start -> report
    assert m.reports == 1
    assert m.interval.train_tokens_per_s == pytest.approx(700 / 7)
    assert m.interval.seconds_per_step == pytest.approx(1.0)
    assert m.session.session_tokens_per_s == pytest.approx(700 / 10)
    assert m.phases.totals_s["reporting"] == pytest.approx(0.5)
    for _ in range(3):
        clock.advance(1)
        m.on_step(100)
    m.finish("completed")
    # the second (final) report's snapshot came before its own cost, after the first report's cost
    assert m.interval.train_tokens_per_s == pytest.approx(300 / 3)
    assert m.session.session_tokens_per_s == pytest.approx(1000 / 13.5)
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["phases_s"]["train"] == pytest.approx(10)
    assert passport["phases_s"]["eval"] == pytest.approx(3)
    assert passport["phases_s"]["reporting"] == pytest.approx(1.0)
    assert passport["elapsed_s"] == pytest.approx(14.0)
    assert passport["throughput"]["train_tokens_per_s"] == pytest.approx(100)
    assert passport["throughput"]["session_tokens_per_s"] == pytest.approx(1000 / 14)
    assert passport["goodput"] == pytest.approx(10 / 14)


def test_interval_records_are_flushed_at_each_report(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock, interval_s=1.0).start()
    for _ in range(3):
        clock.advance(1)
        m.on_step(10)
    kinds = [e["kind"] for e in read_events(m.run_dir / "events.jsonl")]  # read before finish: already on disk
    assert kinds.count("interval") == 3 and kinds[0] == "start"
    assert all(e["schema_version"] == 1 for e in read_events(m.run_dir / "events.jsonl"))
    m.finish("completed")


def test_zero_duration_run_reports_none_not_inf(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock).start()
    m.finish("completed")
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["throughput"] == {"train_tokens_per_s": None, "session_tokens_per_s": None,
                                      "seconds_per_step": None}
    assert passport["goodput"] is None


def test_no_report_inside_a_phase_so_time_is_not_counted_twice(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock, interval_s=1.0).start()
    m.enter_phase("eval")
    clock.advance(5)
    m.record({"val_loss": 1.0})  # due, but inside eval: deferred
    assert m.reports == 0
    m.exit_phase()
    m.finish("completed")
    assert m.phases.totals_s["eval"] == 5 and m.phases.totals_s["reporting"] == 0


def test_carve_moves_data_wait_out_of_training(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock, interval_s=100).start()
    clock.advance(10)
    m.carve("data_wait", 2.5)
    m.on_step(100)
    m.finish("completed")
    assert m.phases.totals_s["train"] == 7.5 and m.phases.totals_s["data_wait"] == 2.5
    assert m.interval.train_tokens_per_s == pytest.approx(100 / 7.5)


def test_emit_records_series_at_the_current_step(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock).start()
    m.on_step(1)
    m.record({"train_loss": 2.0, "lr": 1e-3})
    m.finish("completed")
    assert m.series["train_loss"].stats().last == 2.0 and m.series["train_loss"].stats().last_step == 1
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["series"]["lr"]["count"] == 1


def test_non_scalar_emit_warns_once_and_the_run_goes_on(run_root):
    m = _monitor(run_root, FakeClock()).start()
    with pytest.warns(MonitorWarning, match="ignored"):
        m.record({"bad": "text"})
        m.record({"bad": "text"})
    m.record({"good": 1.0})
    m.finish("completed")
    assert len(m.warnings) == 1 and m.series["good"].stats().count == 1


def test_only_one_run_at_a_time_and_active_is_cleared(run_root):
    m = _monitor(run_root, FakeClock()).start()
    assert active() is m
    with pytest.raises(RuntimeError, match="already being monitored"):
        _monitor(run_root, FakeClock()).start()
    m.finish("completed")
    assert active() is None


def test_a_report_fault_warns_and_the_run_completes(run_root):
    clock = FakeClock()
    m = _monitor(run_root, clock, interval_s=1.0).start()

    def broken():
        raise OSError("disk full")

    m.lifecycle.memory_probe.sample = broken
    with pytest.warns(MonitorWarning, match="disk full"):
        clock.advance(2)
        m.on_step(5)
    m.on_step(5)
    m.finish("completed")
    assert m.steps == 2 and m.status == "completed" and m.reports == 2
    assert [e["kind"] for e in read_events(m.run_dir / "events.jsonl")].count("interval") == 2


def test_extension_warnings_reach_the_text_line_once(run_root):
    import io

    class Starving:
        name = "starving"

        def start(self, monitor):
            pass

        def stop(self):
            pass

        def warnings(self):
            return ["data waits are 35% of step time: the loader is starving the GPU"]

    clock = FakeClock()
    out = io.StringIO()
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0), clock=clock, text=True, probes=False, out=out,
                extensions=[Starving()]).start()
    for _ in range(3):
        clock.advance(1)
        m.on_step(10)
    m.finish("completed")
    text = out.getvalue()
    assert text.count("trainmeter warning: data waits are 35%") == 1
    assert text.count("[step ") == 3


def test_an_extensions_on_step_runs_every_step_until_it_asks_for_a_later_one(tmp_path):
    from trainmeter.core.extension import ExtensionBase
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options

    seen = []

    class Sampled(ExtensionBase):
        name = "sampled"

        def start(self, monitor):
            self.m = monitor

        def on_step(self):
            seen.append(self.m.steps)
            if self.m.steps >= 3:
                self.m.next_step_hook_at(self.m.steps + 4, self)

    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), extensions=[Sampled()],
                     text=False)
    m.start()
    for _ in range(12):
        m.on_step(1)
    m.finish("completed")
    m.on_step(1)  # after its stop: not called
    assert seen == [1, 2, 3, 7, 11]
