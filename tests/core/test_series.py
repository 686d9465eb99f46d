import math

from trainmeter.core.series import Series


def test_read_from_cursor_returns_only_new_points():
    s = Series("loss")
    for i in range(5):
        s.append(i, i * 0.5, float(i))
    end, steps, times, values = s.read(0)
    assert end == 5 and steps == [0, 1, 2, 3, 4] and values == [0, 1, 2, 3, 4]
    s.append(5, 2.5, 5.0)
    end2, steps2, _, _ = s.read(end)
    assert end2 == 6 and steps2 == [5]


def test_trim_bounds_memory_and_keeps_absolute_positions():
    s = Series("loss")
    for i in range(10):
        s.append(i, 0.0, float(i))
    s.trim(7)
    assert s.pending == 3
    end, steps, _, _ = s.read(0)
    assert end == 10 and steps == [7, 8, 9]


def test_stats_track_min_max_count_skip_non_finite_and_count_them():
    s = Series("loss")
    for v in (3.0, 1.0, math.nan, 2.0):
        s.append(1, 0.0, v)
    st = s.stats()
    assert (st.last, st.min, st.max, st.count, st.nonfinite) == (2.0, 1.0, 3.0, 4, 1)
    assert st.to_dict()["nonfinite"] == 1


def test_a_non_finite_latest_point_makes_last_none_never_a_stale_finite_value():
    s = Series("loss")
    s.append(1, 0.0, 0.196)
    assert s.stats().last == 0.196 and "nonfinite" not in s.stats().to_dict()
    for step in range(2, 5):
        s.append(step, 0.0, math.nan)
    st = s.stats()
    assert (st.last, st.min, st.max, st.count, st.last_step, st.nonfinite) == (None, 0.196, 0.196, 4, 4, 3)
    s.append(5, 0.0, 0.5)
    assert s.stats().last == 0.5


def test_step_series_reads_one_point_per_step_with_its_tokens_across_changes_and_trims():
    from tests.fakes.series import step_append
    from trainmeter.core.series import StepSeries

    s = StepSeries("tokens_per_step")
    tokens = [24, 24, 24, 10, 10, 24, 7]
    for i, n in enumerate(tokens):
        step_append(s, i + 1, float(i), n)
    assert s._runs == [(0, 24), (3, 10), (5, 24), (6, 7)]  # one run per change, not one entry per step
    end, steps, times, values = s.read(0)
    assert (end, steps, times, values) == (7, [1, 2, 3, 4, 5, 6, 7], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], tokens)
    assert s.read(4) == (7, [5, 6, 7], [4.0, 5.0, 6.0], [10, 24, 7])
    s.trim(4)
    assert s.pending == 3 and s.end == 7 and s._runs == [(3, 10), (5, 24), (6, 7)]
    assert s.read(0) == (7, [5, 6, 7], [4.0, 5.0, 6.0], [10, 24, 7])  # trimmed points are skipped
    step_append(s, 8, 7.0, 7)
    assert s.read(7) == (8, [8], [7.0], [7])
    stats = s.stats()
    assert (stats.count, stats.last_step, stats.last, stats.min, stats.max) == (8, 8, 7, 7, 24)


def test_series_stats_skip_nan_and_infinities():
    s = Series("x")
    for v in (float("nan"), 2.0, float("inf"), -1.0, float("-inf")):
        s.append(1, 0.0, v)
    stats = s.stats()
    assert (stats.last, stats.min, stats.max, stats.count, stats.nonfinite) == (None, -1.0, 2.0, 5, 3)


def test_stats_fold_matches_a_point_by_point_fold_first_extreme_kept_non_finite_skipped() -> None:
    import math as _m

    s = Series("x")
    values = [0.0, -0.0, 2.5, _m.nan, -_m.inf, 2.5, -1.0, _m.inf, -1.0, 10**400, 3.0]
    for i, v in enumerate(values[:5]):
        s.append(i + 1, float(i), v)
    first = s.stats()
    assert (first.last, first.min, first.max) == (None, 0.0, 2.5) and str(first.min) == "0.0"  # 0.0 came first
    for i, v in enumerate(values[5:], start=6):
        s.append(i, float(i), v)
    st = s.stats()  # an int past float range is finite (the compare the fold always used), not an error
    assert (st.last, st.min, st.max, st.count, st.last_step, st.nonfinite) == (3.0, -1.0, 10**400, 11, 11, 3)
