"""The live ETA's pace early in a run (docs/spec.md sections 5 and 12): startup is not the pace."""

from __future__ import annotations

import pytest

from tests.widget.test_publisher import Recorder, _monitor
from trainmeter.core.clock import FakeClock
from trainmeter.widget.publisher import Publisher

BUDGET_STEPS = 20_000
STEADY_STEPS_PER_S = 150


def _steps(m, clock, pub, *, seconds: float, steps_per_s: float) -> None:
    """Steps spread evenly (the clock moves on at each), the publisher ticking at each whole second."""
    for _ in range(round(seconds * steps_per_s)):
        before = clock()
        clock.advance(1.0 / steps_per_s)
        m.on_step(128, loss_value=1.0)
        if int(clock() + 1e-9) > int(before + 1e-9):
            pub.tick()


def _slow_start(run_root, *, first_step_s: float, warm_steps_per_s: int):
    """A run whose first step ends at ``first_step_s`` (imports, the model built), then steps at ``warm_steps_per_s``
    until 2 s (allocator warm-up), then steady at :data:`STEADY_STEPS_PER_S`."""
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0, budget_steps=BUDGET_STEPS)
    rec = Recorder(clock)
    pub = Publisher(m.context, rec, clock=clock)
    clock.advance(first_step_s)
    m.on_step(128, loss_value=1.0)
    pub.tick()
    if first_step_s < 2.0:
        _steps(m, clock, pub, seconds=2.0 - first_step_s, steps_per_s=warm_steps_per_s)
    return m, clock, pub, rec


@pytest.mark.parametrize(("first_step_s", "warm_steps_per_s"), [(2.0, 0), (1.0, 50), (0.5, 15)])
def test_after_a_slow_first_two_seconds_the_eta_is_within_15_percent_of_the_time_left_from_5_s_on(
        run_root, first_step_s, warm_steps_per_s):
    m, clock, pub, rec = _slow_start(run_root, first_step_s=first_step_s, warm_steps_per_s=warm_steps_per_s)
    errors = []
    for _ in range(12):  # to 14 s: one tick of the publisher a second
        _steps(m, clock, pub, seconds=1.0, steps_per_s=STEADY_STEPS_PER_S)
        true_left_s = (BUDGET_STEPS - m.steps) / STEADY_STEPS_PER_S
        if clock() >= 5.0:
            errors.append(rec.view["progress"]["eta_s"] / true_left_s - 1)
    assert rec.view["progress"]["pace"] == "recent"
    assert all(abs(e) <= 0.15 for e in errors), errors
    assert abs(errors[-1]) <= 0.05, errors  # and closer as the run ages


def test_before_a_step_after_the_first_the_recent_pace_is_unknown_not_the_startup():
    from trainmeter.widget.live_rate import RecentRate

    rate = RecentRate()
    rate.extend([2.0], [128.0])  # the first step ends 2 s into the cell
    first = rate.figures()
    assert first.steps_per_s == 0.5 and first.smoothed_steps_per_s is None
    rate.extend([2.0 + i / 150 for i in range(1, 151)], [128.0] * 150)
    assert rate.figures().smoothed_steps_per_s == pytest.approx(150.0)
