"""Each verdict fires on its injected pattern, at the step where it began; a clean 10,000-step run stays silent."""

from __future__ import annotations

import math
import random

import pytest

from trainmeter.verdicts.rules import ReportPoint, VerdictEngine

GIB = 2**30
MIB = 2**20
REPORT_EVERY = 100
STEPS = 10_000


def clean_run(*, loss=None, tps=None, mem=None, data_wait=None, eval_s=None, sm=None, seed=0,
              token_unit="tokens") -> VerdictEngine:
    """A synthetic 10,000-step run (a report every 100 steps); each keyword overrides one pattern.

    ``loss(step, clean) -> value``, ``tps(step, clean)``, ``mem(step, clean)``, ``data_wait(step) -> share``,
    ``eval_s(step) -> eval seconds in the window``, ``sm(step, clean)``.
    """
    rng = random.Random(seed)
    engine = VerdictEngine()
    elapsed = 0.0
    phases = {"train": 0.0, "data_wait": 0.0, "eval": 0.0, "checkpoint": 0.0}
    for step in range(1, STEPS + 1):
        value = 1.0 + 3.0 * math.exp(-step / 3000) + rng.gauss(0, 0.02)
        engine.add_loss(step, loss(step, value) if loss else value)
        if step % REPORT_EVERY:
            continue
        window_s = 10.0
        share = data_wait(step) if data_wait else 0.05 + rng.uniform(-0.02, 0.02)
        ev = eval_s(step) if eval_s else (2.0 if step % 2000 == 0 else 0.0)
        phases["data_wait"] += share * window_s
        phases["train"] += (1 - share) * window_s
        phases["eval"] += ev
        elapsed += window_s + ev
        t = 50_000 * (1 + rng.gauss(0, 0.03))
        m = 20 * GIB + rng.uniform(-10, 10) * MIB
        s = 0.9 + rng.uniform(-0.03, 0.03)
        engine.add_report(ReportPoint(
            step=step, elapsed_s=elapsed, tokens_per_s=tps(step, t) if tps else t, token_unit=token_unit,
            mem_bytes=mem(step, m) if mem else m, phases_s=dict(phases),
            gpus={0: {"util_gpu": 0.98, "sm_activity": sm(step, s) if sm else s, "tensor_activity": 0.6}}))
    return engine


def kinds(engine: VerdictEngine) -> dict[str, int]:
    return {v.kind: v.step for v in engine.verdicts}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clean_ten_thousand_step_run_gets_no_verdict(seed) -> None:
    assert clean_run(seed=seed).verdicts == ()


def test_nan_loss_fires_at_its_step() -> None:
    engine = clean_run(loss=lambda s, v: math.nan if s == 5_000 else v)
    assert kinds(engine) == {"loss_nonfinite": 5_000}
    assert "train_loss became nan at step 5000" in engine.verdicts[0].sentence


def test_inf_loss_fires_too() -> None:
    assert kinds(clean_run(loss=lambda s, v: math.inf if s >= 7_000 else v)) == {"loss_nonfinite": 7_000}


def test_loss_spike_fires_where_it_began_and_states_the_threshold() -> None:
    engine = clean_run(loss=lambda s, v: v + 2.0 if 6_000 <= s < 6_010 else v)
    assert kinds(engine) == {"loss_spike": 6_000}
    assert "robust z > 8" in engine.verdicts[0].sentence and "3 points in a row" in engine.verdicts[0].sentence


def test_a_single_loss_outlier_is_not_a_spike() -> None:
    assert clean_run(loss=lambda s, v: v + 50.0 if s in (4_000, 4_002) else v).verdicts == ()


def test_throughput_drop_fires_against_the_runs_own_median() -> None:
    engine = clean_run(tps=lambda s, t: t * 0.7 if s >= 7_000 else t)
    assert kinds(engine) == {"throughput_drop": 7_000}
    assert "more than 20% lower" in engine.verdicts[0].sentence
    assert "k tokens/s against the run's median of" in engine.verdicts[0].sentence  # as the rate tile prints it


def test_a_throughput_drop_of_a_run_counted_in_samples_says_samples_per_s() -> None:
    engine = clean_run(tps=lambda s, t: t * 0.7 if s >= 7_000 else t, token_unit="samples")
    assert "k samples/s against the run's median of" in engine.verdicts[0].sentence
    assert "tokens/s" not in engine.verdicts[0].sentence


def test_one_slow_report_is_not_a_throughput_drop() -> None:
    assert clean_run(tps=lambda s, t: t * 0.3 if s in (5_000, 5_200) else t).verdicts == ()


def test_memory_creep_fires_when_memory_rises_linearly() -> None:
    engine = clean_run(mem=lambda s, m: m + max(0, s - 3_000) // REPORT_EVERY * 64 * MIB)
    assert set(kinds(engine)) == {"memory_creep"}
    assert 2_900 <= kinds(engine)["memory_creep"] <= 3_100
    assert "MiB per report" in engine.verdicts[0].sentence


def test_a_memory_step_up_is_not_creep() -> None:
    assert clean_run(mem=lambda s, m: m + (4 * GIB if s >= 3_000 else 0)).verdicts == ()


def test_data_starved_fires_above_twenty_percent_waits() -> None:
    engine = clean_run(data_wait=lambda s: 0.35 if s >= 8_100 else 0.05)  # windows with no eval in them
    assert kinds(engine) == {"data_starved": 8_100}
    assert "35% of the time" in engine.verdicts[0].sentence


def test_one_starved_window_is_not_a_verdict() -> None:
    assert clean_run(data_wait=lambda s: 0.9 if s == 8_000 else 0.05).verdicts == ()


def test_eval_heavy_fires_when_eval_passes_fifteen_percent_of_the_session() -> None:
    engine = clean_run(eval_s=lambda s: 4.0)  # 4 s of eval per 10 s window: 29% of the session
    assert kinds(engine) == {"eval_heavy": 100}
    assert "above 15%" in engine.verdicts[0].sentence


def test_gpu_util_high_with_low_sm_activity_fires() -> None:
    engine = clean_run(sm=lambda s, v: 0.05 if s >= 2_000 else v)
    assert kinds(engine) == {"gpu_util_misleading": 2_000}
    assert "GPU-Util 98%" in engine.verdicts[0].sentence and "SM activity is 5%" in engine.verdicts[0].sentence


def test_one_low_sm_sample_is_not_a_verdict() -> None:
    assert clean_run(sm=lambda s, v: 0.05 if s == 2_000 else v).verdicts == ()


def test_each_kind_fires_once() -> None:
    engine = clean_run(loss=lambda s, v: math.nan if s % 1000 == 0 else v)
    assert [v.kind for v in engine.verdicts] == ["loss_nonfinite"]


def _inside(engine: VerdictEngine) -> str:
    return repr((list(engine._losses), engine._spike.n, engine._spike.first_step, engine._spike_ref, engine._since_ref,
                 engine.verdicts))


@pytest.mark.parametrize("seed", range(40))
def test_add_losses_is_add_loss_on_each_point(seed) -> None:
    """The report worker's batch feed leaves the engine as one add_loss per point would: NaN, inf, spikes,
    reference updates and streaks across the batches' edges (docs/spec.md section 20)."""
    rng = random.Random(seed)
    values = []
    for _ in range(rng.choice([60, 400, 3000])):
        v = 1.0 + rng.gauss(0, rng.choice([0.0, 0.001, 0.1]))
        r = rng.random()
        values.append(math.nan if r < 0.003 else math.inf if r < 0.006 else 1e308 if r < 0.0065
                      else 1.0 + rng.choice([1, 10, 1000]) * rng.random() if r < 0.02 else v)
    each, batched = VerdictEngine(), VerdictEngine()
    i = 0
    while i < len(values):
        k = rng.randint(1, 400)
        for step, value in enumerate(values[i:i + k], start=i + 1):
            each.add_loss(step, value)
        batched.add_losses(list(range(i + 1, i + 1 + len(values[i:i + k]))), values[i:i + k])
        assert _inside(batched) == _inside(each)
        i += k
