"""The smoothed loss: bias-corrected EMA, non-finite losses skipped, beta checked."""

import math

import pytest

from trainmeter.optim.smoothing import EMA_BETA, LossEma


def test_a_constant_loss_smooths_to_itself_from_the_first_step():
    ema = LossEma()
    ema.update([2.0])
    assert ema.value == pytest.approx(2.0)
    ema.update([2.0] * 10)
    assert ema.value == pytest.approx(2.0)


def test_the_average_follows_the_stated_recurrence():
    ema = LossEma(0.5)
    ema.update([4.0, 2.0])
    # raw: 0.5*0 + 0.5*4 = 2; 0.5*2 + 0.5*2 = 2; corrected by 1 - 0.5**2 = 0.75
    assert ema.value == pytest.approx(2.0 / 0.75)


def test_non_finite_losses_are_skipped():
    ema = LossEma()
    ema.update([1.0, math.nan, math.inf, 1.0])
    assert ema.count == 2 and ema.value == pytest.approx(1.0)


def test_no_value_before_the_first_loss_and_bad_beta_is_refused():
    assert LossEma().value is None
    assert EMA_BETA == 0.98
    with pytest.raises(ValueError, match=r"EMA beta must be in \[0, 1\), got 1.0"):
        LossEma(1.0)


def test_the_trace_gives_the_value_after_each_loss_and_a_gap_at_a_non_finite_one():
    losses = [3.0, 2.5, math.nan, 2.0, 1.75]
    traced = LossEma(0.9).trace(losses)
    for i, loss in enumerate(losses):
        ema = LossEma(0.9)
        ema.update(losses[: i + 1])
        if math.isfinite(loss):
            assert traced[i] == pytest.approx(ema.value)
        else:
            assert math.isnan(traced[i])


def test_a_trace_in_pieces_continues_where_the_last_one_ended():
    whole = LossEma().trace([1.0, 4.0, 2.0, 3.0])
    ema = LossEma()
    pieces = ema.trace([1.0, 4.0]) + ema.trace([2.0, 3.0])
    assert pieces == pytest.approx(whole) and ema.count == 4 and ema.value == pytest.approx(whole[-1])


def _reference(beta, chunks):
    avg, n = 0.0, 0
    for chunk in chunks:
        for loss in chunk:
            if math.isfinite(loss):
                avg = beta * avg + (1.0 - beta) * loss
                n += 1
    return avg, n


def test_the_batched_fold_is_bit_for_bit_the_point_by_point_recurrence_in_any_chunking():
    import random

    rng = random.Random(7)
    losses = [rng.lognormvariate(0.0, 1.0) for _ in range(1001)]
    for i in (3, 40, 41, 500):
        losses[i] = (math.nan, math.inf, -math.inf, math.nan)[i % 4]
    for sizes in ((1001,), (1, 2, 3, 995), (7,) * 143, (4, 5, 6, 7, 979)):
        ema, chunks, at = LossEma(), [], 0
        for size in sizes:
            chunks.append(losses[at:at + size])
            at += size
        for chunk in chunks:
            ema.update(iter(chunk) if len(chunk) == 5 else chunk)
        avg, n = _reference(EMA_BETA, chunks)
        assert ema.count == n == 997 and ema.value == avg / (1.0 - EMA_BETA**n)  # exact, not approximate
    ints, floats = LossEma(), LossEma()
    ints.update([1, 2, 3, 4, 5])
    floats.update([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (ints.value, ints.count) == (floats.value, floats.count)


def test_a_report_folded_later_stops_at_its_end_even_when_the_fold_ahead_went_past_it():
    from trainmeter.core.series import Series
    from trainmeter.optim.smoothing import EmaCursor

    series = Series("train_loss")
    values = [1.0 + math.sin(i / 3.0) for i in range(60)]
    for i, v in enumerate(values[:40]):
        series.append(i + 1, float(i), v)
    cursor = EmaCursor(LossEma())
    cursor.fold_to_end(series, 20)  # a report at position 20, folded after points up to 40 came
    expected = LossEma()
    expected.update(values[:20])
    assert (cursor.ema.value, cursor.ema.count) == (expected.value, expected.count)
    cursor.fold_ahead(series)  # the worker's idle fold: up to 40
    for i, v in enumerate(values[40:], start=40):
        series.append(i + 1, float(i), v)
    cursor.fold_to_end(series, 30)  # the next report ended at 30, before the ahead state
    expected.update(values[20:30])
    assert (cursor.ema.value, cursor.ema.count) == (expected.value, expected.count)
    cursor.fold_to_end(series)  # the final report: every point
    expected.update(values[30:])
    assert (cursor.ema.value, cursor.ema.count) == (expected.value, expected.count)
