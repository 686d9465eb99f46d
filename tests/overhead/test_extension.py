"""The monitor's own cost: sampled on_step timing, reporting share, trainmeter threads' CPU, run-log bytes."""

from __future__ import annotations

import json
import threading
import time

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.host.extension import NodeSampler
from trainmeter.options import make_options
from trainmeter.overhead.extension import MAX_SAMPLE_EVERY, SAMPLE_EVERY, TIMED_SHARE, Overhead


class Ticks:
    """A perf counter that moves 5 us per read (and counts its reads)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.t += 5e-6
        self.reads += 1
        return self.t


def _step(m, ticks, tokens: int) -> bool:
    """One step; whether the wing timed it (it read its counter during the step)."""
    before = ticks.reads
    m.on_step(tokens)
    return ticks.reads > before


def test_the_step_rule_is_timed_on_one_step_in_sample_every_and_on_no_other(tmp_path) -> None:
    clock = FakeClock()
    ticks = Ticks()
    ext = Overhead(perf_counter=ticks)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[ext]).start()
    timed = []
    for _ in range(10 * SAMPLE_EVERY):
        clock.advance(0.01)
        timed.append(_step(m, ticks, 8))
    assert [i + 1 for i, w in enumerate(timed) if w] == [k * SAMPLE_EVERY for k in range(1, 11)]
    assert m.steps == 10 * SAMPLE_EVERY and m.tokens == 80 * SAMPLE_EVERY  # the timing changes nothing
    m.finish("completed")
    p = json.loads((m.run_dir / "passport.json").read_text())["overhead"]
    assert p["on_step_samples"] == 10 and p["sample_every"] == SAMPLE_EVERY
    assert p["on_step_us"] == pytest.approx(5.0)  # one tick between the two reads of each timed step
    assert p["run_log_bytes"] > 0 and p["browser_bytes"] is None
    assert p["reporting_share"] is not None


def test_short_steps_are_timed_less_often_until_the_timing_costs_its_share_of_a_step(tmp_path) -> None:
    clock = FakeClock()
    ticks = Ticks()
    ext = Overhead(perf_counter=ticks)  # each timed on_step: 5 us
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[ext]).start()
    timed_at = []
    for step in range(1, 8001):
        clock.advance(200e-6)  # 200 us steps: 5 us / (1e-4 x 200 us) = 250 steps from one timed step to the next
        if _step(m, ticks, 8):
            timed_at.append(step)
    assert timed_at[:2] == [SAMPLE_EVERY, 2 * SAMPLE_EVERY]  # the first stride is the least one
    every = round(5e-6 / (TIMED_SHARE * 200e-6))
    gaps = [b - a for a, b in zip(timed_at[1:], timed_at[2:], strict=False)]
    assert len(gaps) > 20 and set(gaps) <= {every, every + 1}  # ceil of a float sum: 250 or 251
    assert m.steps == 8000 and m.tokens == 8 * 8000
    m.finish("completed")
    p = json.loads((m.run_dir / "passport.json").read_text())["overhead"]
    assert p["sample_every"] in (every, every + 1) and p["on_step_samples"] == len(timed_at)


def test_the_stride_stays_within_its_bounds(tmp_path) -> None:
    for step_s, want in ((1.0, SAMPLE_EVERY), (1e-9, MAX_SAMPLE_EVERY)):
        clock = FakeClock()
        ext = Overhead(perf_counter=Ticks())
        m = make_monitor(make_options(run_dir=tmp_path / str(step_s), interval_s=3600), clock=clock, text=False,
                         probes=False, extensions=[ext]).start()
        for _ in range(4 * MAX_SAMPLE_EVERY):
            clock.advance(step_s)
            m.on_step(1)
        assert ext.every == want
        m.finish("completed")


def test_trainmeter_threads_cpu_is_read_per_thread(tmp_path) -> None:
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    t = threading.Thread(target=spin, name="trainmeter-test-spin", daemon=True)
    t.start()
    ext = Overhead()
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=FakeClock(), text=False, probes=False,
                     extensions=[ext, NodeSampler(period_s=0.02)]).start()
    for _ in range(3):
        m.on_step(1)
    deadline = time.monotonic() + 20
    while not (m.process_memory.thread_cpu_s or {}).get(t.native_id) and time.monotonic() < deadline:
        time.sleep(0.02)  # the node thread reads the threads' CPU (never the training thread)
    m.finish("completed")
    stop.set()
    t.join()
    threads = json.loads((m.run_dir / "passport.json").read_text())["overhead"]["threads"]
    assert "trainmeter-test-spin" in threads["names"] and threads["cpu_s"] > 0


def test_overhead_is_first_among_the_default_extensions() -> None:
    assert default_extensions(make_options())[0].name == "overhead"
