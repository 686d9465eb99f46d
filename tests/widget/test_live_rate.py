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
