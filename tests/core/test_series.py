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


def test_stats_track_last_min_max_count_and_skip_non_finite():
    s = Series("loss")
    for v in (3.0, 1.0, math.nan, 2.0, math.inf):
        s.append(1, 0.0, v)
    st = s.stats()
    assert (st.last, st.min, st.max, st.count) == (2.0, 1.0, 3.0, 5)
