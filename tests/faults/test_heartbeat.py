"""A long step is not silent: heartbeat records and a bounded text line (docs/spec.md section 18)."""

from __future__ import annotations

import io
import json

from trainmeter.core.clock import FakeClock
from trainmeter.core.heartbeat import Heartbeat
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.events import read_events


def _monitor(run_root, clock, out):
    m = make_monitor(make_options(run_dir=run_root, name="beat", interval_s=10), clock=clock, text=True, out=out,
                     probes=False, extensions=[]).start()
    m.lifecycle.heartbeat.stop()  # the test drives the beats on the fake clock instead of the thread
    return m


def test_a_sixty_second_step_leaves_heartbeats_that_say_which_step_and_since_when(run_root):
    clock, out = FakeClock(), io.StringIO()
    m = _monitor(run_root, clock, out)
    beat = Heartbeat(m, 10.0, m.faults.say)
    for _ in range(40):
        m.on_step(10)
        clock.advance(1.0)
        assert beat.beat(clock()) is None  # steps and reports come: nothing extra is written
    for _ in range(60):  # step 41 runs for 60 s: no step boundary, no report
        clock.advance(1.0)
        beat.beat(clock())
    log = m.run_dir / "events.jsonl"
    beats = read_events(log, kinds=("heartbeat",))
    assert 4 <= len(beats) <= 6  # one per interval once no report came for an interval
    last = beats[-1]
    assert last["step"] == 41 and last["steps_done"] == 40 and last["phase"] == "train"
    assert 50 <= last["step_running_s"] <= 60 and last["since_report_s"] >= 50
    lines = [line for line in out.getvalue().splitlines() if "running for" in line]
    assert lines and len(lines) <= 2  # at most one line per 30 s
    assert lines[0].startswith("trainmeter: step 41 running for ")
    m.on_step(10)
    m.finish("completed")
    assert json.loads((m.run_dir / "passport.json").read_text())["steps"] == 41


def test_the_heartbeat_thread_stops_with_the_run(run_root):
    import threading

    m = make_monitor(make_options(run_dir=run_root, name="beat"), text=False, probes=False, extensions=[]).start()
    assert any(t.name == "trainmeter-heartbeat" for t in threading.enumerate())
    m.finish("completed")
    assert not any(t.name == "trainmeter-heartbeat" and t.is_alive() for t in threading.enumerate())


def test_a_long_open_phase_is_named_in_the_heartbeat(run_root):
    import trainmeter as tm

    clock, out = FakeClock(), io.StringIO()
    m = _monitor(run_root, clock, out)
    beat = Heartbeat(m, 10.0, m.faults.say)
    m.on_step(10)
    with tm.phase("eval"):
        for _ in range(40):  # a 40 s eval: reports wait for the phase to end
            clock.advance(1.0)
            beat.beat(clock())
    m.finish("completed")
    (last, *_) = reversed(read_events(m.run_dir / "events.jsonl", kinds=("heartbeat",)))
    assert last["phase"] == "eval" and last["step"] == 2
    assert "step 2 running for " in out.getvalue() and "(in eval)" in out.getvalue()


def test_a_short_step_without_reports_prints_no_heartbeat_line(run_root):
    """Reports may wait (a slow step under load, an open phase): the line is for a step running 30 s or more."""
    clock, out = FakeClock(), io.StringIO()
    m = _monitor(run_root, clock, out)
    beat = Heartbeat(m, 2.0, m.faults.say)
    m.on_step(10)
    for _ in range(20):  # 5 s steps, and no report comes: heartbeats in the log, no line printed
        clock.advance(5.0)
        beat.beat(clock())
        m.steps_state.steps += 1
    assert read_events(m.run_dir / "events.jsonl", kinds=("heartbeat",)) and "running for" not in out.getvalue()
    m.finish("completed")


def test_the_thread_sleeps_until_the_next_report_is_due_and_ticks_once_it_is_overdue(run_root):
    clock, out = FakeClock(), io.StringIO()
    m = _monitor(run_root, clock, out)
    beat = Heartbeat(m, 10.0, m.faults.say)
    m.steps_state.next_report_s = clock() + 7.0
    assert beat.wait_s(clock()) == 7.0  # nothing can be due before the report: no wake-up in between
    m.steps_state.next_report_s = clock() + 3600.0
    assert beat.wait_s(clock()) == 10.0  # at most an interval
    m.steps_state.next_report_s = clock() - 5.0
    assert beat.wait_s(clock()) == 1.0  # overdue: a tick, so a long step is seen within one
    m.finish("completed")


def test_a_long_step_seen_after_a_long_sleep_is_timed_from_the_last_counted_steps_end(run_root):
    clock, out = FakeClock(), io.StringIO()
    m = _monitor(run_root, clock, out)
    beat = Heartbeat(m, 10.0, m.faults.say)
    beat.beat(clock())
    for _ in range(5):  # steps the thread does not see one by one (it slept until the report was due)
        clock.advance(1.0)
        m.on_step(10)
    ended_s = clock()
    clock.advance(25.0)  # step 6 runs long; the thread looks only now
    beat.beat(clock())
    clock.advance(15.0)
    record = beat.beat(clock())
    assert record is not None and record["step"] == 6
    assert record["step_running_s"] == clock() - ended_s == 40.0  # from step 5's end, not from the late look
    m.finish("completed")
