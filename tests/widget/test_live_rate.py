import pytest

from trainmeter.widget.live_rate import RecentRate, RssReader


def test_rate_is_a_sliding_mean_over_the_window_ending_at_the_last_step():
    r = RecentRate(window_s=2.0)
    r.extend([0.1 * i for i in range(1, 51)], [100] * 50)  # 10 steps/s, 1000 tok/s for 5 s
    f = r.figures()
    assert f is not None
    assert f.tokens_per_s == pytest.approx(1000.0, rel=0.06) and f.steps_per_s == pytest.approx(10.0, rel=0.06)
    assert f.window_s == pytest.approx(2.0, abs=0.11) and f.t_s == pytest.approx(5.0)


def test_a_short_last_window_is_merged_not_a_spike():
    r = RecentRate(window_s=10.0)
    r.extend([0.1 * i for i in range(1, 201)], [100] * 200)  # 20 s at 1000 tok/s
    r.extend([20.05, 20.1], [100, 100])  # two fast steps at the very end
    f = r.figures()
    assert f.tokens_per_s == pytest.approx(1000.0, rel=0.03)


def test_a_pause_or_interrupt_draws_no_cliff_to_zero():
    r = RecentRate(window_s=5.0)
    r.extend([0.5 * i for i in range(1, 21)], [50] * 20)
    before = r.figures()
    r.extend([], [])  # nothing new for a long while (eval, or Ctrl-C): the window ends at the last step
    after = r.figures()
    assert after == before and after.tokens_per_s > 0


def test_early_in_a_run_the_window_starts_at_the_run_start():
    r = RecentRate(window_s=10.0)
    assert r.figures() is None
    r.extend([0.5, 1.0], [10, 10])
    f = r.figures()
    assert f.window_s == pytest.approx(1.0) and f.tokens_per_s == pytest.approx(20.0)


def test_rss_reader_reads_a_positive_number_or_none():
    value = RssReader().read()
    assert value is None or value > 0


def test_the_training_only_rate_is_over_the_same_window_and_never_below_the_session_rate() -> None:
    from trainmeter.widget.live_rate import RecentRate

    rate = RecentRate(window_s=10.0)
    # 30 s of steps, 10 a second of 100 tokens; a third of every second is spent outside training
    for second in range(1, 31):
        rate.extend([second - 1 + (i + 1) / 10 for i in range(10)], [100.0] * 10)
        rate.note_clock(float(second), second * 2 / 3)
    f = rate.figures()
    assert f is not None and f.window_s == pytest.approx(10.0, abs=0.2)
    assert f.tokens_per_s == pytest.approx(1000.0)
    assert f.window_train_s == pytest.approx(f.window_s * 2 / 3)
    assert f.train_tokens_per_s == pytest.approx(1500.0) and f.train_tokens_per_s >= f.tokens_per_s


def test_without_a_phase_clock_sample_covering_the_window_there_is_no_training_only_rate() -> None:
    from trainmeter.widget.live_rate import RecentRate

    rate = RecentRate(window_s=10.0)
    rate.extend([0.5, 1.0], [10.0, 10.0])
    assert rate.figures().train_tokens_per_s is None  # the step at 1.0 s is past the last sample (0 s)


def test_the_eta_from_the_smoothed_pace_counts_down_about_a_second_per_second_despite_a_noisy_rate() -> None:
    from trainmeter.compute.eta import Pace, eta, recent_pace
    from trainmeter.widget.live_rate import RecentRate

    rate = RecentRate(window_s=10.0)
    etas, t, steps = [], 0.0, 0
    for second in range(1, 121):
        n = 6 if second % 7 == 0 else 5  # a burst every 7 s: the raw 10 s rate jumps by 2%
        if second % 13 == 0:
            n = 2  # an eval pause
        rate.extend([second - 1 + (i + 1) / n for i in range(n)], [1.0] * n)
        steps += n
        f = rate.figures()
        d = eta(steps, 1_000, recent=recent_pace(f, "steps"), training=Pace(name="training-only", per_s=None,
                                                                             window="x"), unit="steps")
        etas.append(d.value)
        t = second
    late = etas[30:]
    assert t == 120 and all(b < a + 1.0 for a, b in zip(late, late[1:], strict=False)), late  # never up by > 1 s
    steps_down = [a - b for a, b in zip(late, late[1:], strict=False)]
    assert max(steps_down) < 6.0, steps_down  # no jump of many seconds between two samples


def test_a_fast_run_holds_a_bounded_window_and_counts_every_step_in_it():
    """60k steps/s for 30 s: the window holds at most MAX_WINDOW_ENTRIES (+ one tick) entries; the steps and tokens
    it counts are exactly those after its first step's end."""
    from trainmeter.widget.live_rate import MAX_WINDOW_ENTRIES

    r, rate, tick = RecentRate(window_s=10.0), 60_000, 30_000  # a publisher tick of 0.5 s
    times = [(i + 1) / rate for i in range(30 * rate)]
    tokens = [1 + i % 7 for i in range(30 * rate)]
    for lo in range(0, len(times), tick):
        r.extend(times[lo:lo + tick], tokens[lo:lo + tick])
        assert len(r._times) <= MAX_WINDOW_ENTRIES + tick
    f = r.figures()
    start_s = f.t_s - f.window_s
    inside = [i for i, t in enumerate(times) if t > start_s]
    assert f.window_steps == len(inside) and f.window_tokens == sum(tokens[i] for i in inside)
    assert f.steps_per_s == pytest.approx(rate, rel=1e-3) and f.window_s == pytest.approx(10.0, abs=1e-3)
