"""Points held between reports stay bounded whatever the step rate, every step is still recorded, and the smoothed
loss the text line shows is the widget's (issue 37: one stream of points, bounded; docs/spec.md section 18)."""

from __future__ import annotations

import io
import json
import math

from tests.fakes.widget import SilentWidget
from trainmeter.comparison.extension import CurvesRecorder
from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.core.series_registry import DRAIN_CHECK_STEPS, DRAIN_POINTS
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.optim.extension import OptimExtension
from trainmeter.optim.smoothing import LossEma
from trainmeter.options import make_options
from trainmeter.widget.publisher import Publisher


def _run(run_root, clock):
    options = make_options(run_dir=run_root, name="stream", interval_s=10.0)
    m = make_monitor(options, clock=clock, text=False, probes=False, out=io.StringIO(),
                     extensions=default_extensions(options))
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=10**9, rss_peak_bytes=10**9)
    return m, Publisher(m.context, SilentWidget(), clock=clock)


def _loss(step: int) -> float:
    return 2.0 + math.exp(-step / 5000.0) + 0.05 * math.sin(step / 7.0)


def _wing(m, cls):
    return next(e for e in m.extensions if isinstance(e, cls))


def _held(m) -> int:
    return max(s.pending for s in (m.step_series, *m.series.values()))


def test_at_sixty_thousand_steps_a_second_the_points_held_stay_bounded_and_every_step_is_recorded(run_root):
    clock = FakeClock(0.0)
    m, pub = _run(run_root, clock)
    losses, most_held = [], 0
    while m.steps < 150_000:  # 2.5 s of a 10 s interval: no report comes between the first and the final one
        for _ in range(15_000):
            clock.advance(1 / 60_000)
            losses.append(_loss(m.steps))
            m.on_step(1024, loss_value=losses[-1])
        most_held = max(most_held, _held(m))
        pub.tick()
    m.finish("completed")
    pub.close()
    assert most_held <= 2 * (DRAIN_POINTS + DRAIN_CHECK_STEPS) < 150_000
    assert m.steps == 150_000 and m.tokens == 150_000 * 1024  # counters stay exact
    records = [json.loads(line) for line in (m.run_dir / "events.jsonl").read_text().splitlines()]
    steps = [s for r in records if r["kind"] == "steps" for s in r["step"]]
    loss = [v for r in records if r["kind"] == "series" and r["name"] == "train_loss" for v in r["value"]]
    assert steps == list(range(1, 150_001)) and loss == losses  # every step's point, once, in order
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["series"]["train_loss"]["count"] == 150_000 and passport["record"]["complete"]
    reference = LossEma()
    reference.twin("train_loss", range(len(losses)), losses)
    # folded by drains and reports, bit for bit
    assert _wing(m, OptimExtension).ema.to_dict()["value"] == reference.to_dict()["value"]
    curve = _wing(m, CurvesRecorder).curves.to_dict()["series"]["train_loss"]
    assert curve["count"] == 150_000  # the curves took every point, the drained ones too


def test_the_widget_draws_the_smoothed_loss_of_every_step_up_to_the_newest(run_root):
    clock = FakeClock(0.0)
    m, pub = _run(run_root, clock)
    for _ in range(400):
        clock.advance(0.1)
        m.on_step(1024, loss_value=_loss(m.steps))
        pub.tick()
    m.report_now()
    pub.tick()
    xs, ys = pub.feed.decimators["train_loss.ema"].columns(include_open=True)
    every = LossEma().twin("train_loss", range(m.steps - 1), [_loss(s) for s in range(m.steps - 1)])[1]
    assert xs[-1] == m.steps - 1 and ys[-1] == every[-1]  # the last point is held a step
    m.finish("completed")
    pub.close()


def test_a_drain_that_runs_after_a_report_went_past_its_ends_writes_and_folds_nothing_twice(run_root):
    """A drain queued on the report worker before a report of the training thread's (``report_now``, the first one)
    runs after it: its ends lie behind what that report wrote and folded."""
    clock = FakeClock(0.0)
    m, pub = _run(run_root, clock)
    losses = []
    for _ in range(3000):
        clock.advance(0.001)
        losses.append(_loss(m.steps))
        m.on_step(1024, loss_value=losses[-1])
    queued = {s.name: s.end for s in (m.step_series, *m.series.values())}
    for _ in range(1000):
        clock.advance(0.001)
        losses.append(_loss(m.steps))
        m.on_step(1024, loss_value=losses[-1])
    m.report_now()
    m.registry._drain(queued)  # the late drain
    m.finish("completed")
    pub.close()
    records = [json.loads(line) for line in (m.run_dir / "events.jsonl").read_text().splitlines()]
    assert [s for r in records if r["kind"] == "steps" for s in r["step"]] == list(range(1, 4001))
    assert [v for r in records if r["kind"] == "series" and r["name"] == "train_loss" for v in r["value"]] == losses
    reference = LossEma()
    reference.twin("train_loss", range(len(losses)), losses)
    assert _wing(m, OptimExtension).ema.to_dict()["value"] == reference.to_dict()["value"]
