from __future__ import annotations

import math
import random

import pytest

from trainmeter.core.decimate import Decimator, decimate


def _noisy(start: int, n: int, rng: random.Random) -> tuple[list[int], list[float]]:
    xs = list(range(start, start + n))
    return xs, [math.sin(x / 5000.0) + rng.random() * 0.1 for x in xs]


def test_million_point_run_stays_within_budget_and_keeps_global_min_and_max():
    rng = random.Random(0)
    d = Decimator("train_loss", budget_points=2000)
    n, chunk = 1_000_000, 997
    for s in range(0, n, chunk):
        xs, ys = _noisy(s, min(chunk, n - s), rng)
        if s <= 654_321 < s + chunk:
            ys[654_321 - s] = -7.5
        if s <= 123_456 < s + chunk:
            ys[123_456 - s] = 11.0
        d.extend(xs, ys)
        assert d.points <= 2000
    xs, ys = d.columns()
    assert d.count == n
    assert len(xs) <= 2000
    assert min(ys) == -7.5 and xs[ys.index(-7.5)] == 654_321
    assert max(ys) == 11.0 and xs[ys.index(11.0)] == 123_456
    assert all(a <= b for a, b in zip(xs, xs[1:], strict=False))
    assert d.width >= n // 2000


def test_result_does_not_depend_on_chunk_sizes():
    rng = random.Random(1)
    xs, ys = _noisy(0, 20_000, rng)
    a = Decimator("s", budget_points=300)
    a.extend(xs, ys)
    b = Decimator("s", budget_points=300)
    i = 0
    for size in [1, 7, 500, 3, 9000, 1, 1, 10_487] * 3:
        b.extend(xs[i:i + size], ys[i:i + size])
        i += size
    assert i >= len(xs)
    assert a.columns() == b.columns()


def test_short_series_is_kept_exactly():
    d = Decimator("val_loss", budget_points=100)
    d.extend([10, 20, 30], [3.0, 2.0, 2.5])
    assert d.columns() == ([10.0, 20.0, 30.0], [3.0, 2.0, 2.5])
    assert d.width == 1


def test_nan_and_inf_become_gap_points_and_do_not_touch_min_max():
    d = Decimator("loss", budget_points=16)
    ys = [1.0, 2.0, math.nan, 4.0, math.inf, 0.5] + [1.0] * 40
    d.extend(list(range(len(ys))), ys)
    xs, out = d.columns()
    assert any(math.isnan(y) for y in out)
    assert not any(math.isinf(y) for y in out)
    finite = [y for y in out if math.isfinite(y)]
    assert min(finite) == 0.5 and max(finite) == 4.0
    assert len(xs) <= 16


def test_all_nan_bucket_emits_one_gap_point():
    d = Decimator("loss", budget_points=10)
    d.extend([1, 2], [math.nan, math.nan])
    xs, ys = d.columns()
    assert xs == [1.0, 2.0] and all(math.isnan(y) for y in ys)


def test_take_new_returns_only_closed_buckets_once():
    d = Decimator("s", budget_points=100)
    d.extend([1, 2, 3], [1.0, 2.0, 3.0])
    assert d.take_new() == ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert d.take_new() == ([], [])
    d.extend([4], [4.0])
    assert d.take_new() == ([4.0], [4.0])


def test_rebucket_keeps_what_was_taken_taken_and_doubles_the_width():
    d = Decimator("s", budget_points=20)
    x = -1
    while d.width == 1:
        d.take_new()  # the live stream takes every tick
        x += 1
        d.extend([x], [float(x % 7)])
    width = d.width
    assert width >= 2 and d.pending == 0
    d.extend([x + 1, x + 2, x + 3], [0.0, 1.0, 2.0])
    xs, _ = d.take_new()
    assert d.width == width and xs and min(xs) > x - 1


def test_points_not_taken_before_a_rebucket_are_taken_after_it_once_and_in_order():
    d = Decimator("s", budget_points=20)
    sent: list[float] = []
    for x in range(200):
        d.extend([x], [float((x * 37) % 11)])
        if x % 7 == 0:  # the stream takes every seventh point: re-buckets fall between takes
            sent.extend(d.take_new()[0])
    sent.extend(d.take_new()[0])
    assert d.width >= 8 and sent == sorted(set(sent))  # each point once, x increasing
    closed_xs, _ = d.columns(include_open=False)
    assert closed_xs[-1] == sent[-1]  # nothing closed is left behind
    assert len(sent) <= 3 * 20


def test_open_bucket_is_left_out_of_live_columns_but_kept_at_the_end():
    d = Decimator("s", budget_points=20)
    d.extend(list(range(33)), [float(i) for i in range(33)])
    closed_xs, _ = d.columns(include_open=False)
    all_xs, all_ys = d.columns(include_open=True)
    assert max(all_ys) == 32.0 and max(closed_xs) < 32
    assert len(all_xs) >= len(closed_xs)


def test_max_points_coarsens_without_losing_extremes():
    rng = random.Random(2)
    xs, ys = _noisy(0, 50_000, rng)
    ys[4321] = -3.0
    d = Decimator("s", budget_points=2000)
    d.extend(xs, ys)
    cx, cy = d.columns(max_points=200)
    assert len(cx) <= 200 and min(cy) == -3.0 and max(cy) == max(ys)


def test_decimate_helper_and_budget_validation():
    xs, ys = decimate(list(range(10_000)), [float(i) for i in range(10_000)], 50)
    assert len(xs) <= 50 and ys[0] == 0.0 and ys[-1] == 9999.0
    with pytest.raises(ValueError, match="at least 8"):
        Decimator("s", budget_points=4)
    with pytest.raises(ValueError, match="2 xs but 1 ys"):
        Decimator("s").extend([1, 2], [1.0])


def test_share_budget_lets_small_series_keep_every_point_and_splits_the_rest():
    from trainmeter.core.decimate import share_budget

    caps = share_budget({"train_loss": 2000, "lr": 2000, "val_loss": 40, "rss_bytes": 12}, 3000)
    assert caps == {"rss_bytes": 12, "val_loss": 40, "train_loss": 1474, "lr": 1474}
    assert sum(caps.values()) <= 3000
    assert share_budget({"a": 5000}, 6000, per_series=2000) == {"a": 2000}
    assert share_budget({f"s{i}": 2000 for i in range(20)}, 6000)["s0"] == 300
    many = share_budget({f"s{i}": 2000 for i in range(200)}, 6000)  # the floor never passes the total
    assert many["s0"] == 30 and sum(many.values()) <= 6000


def test_a_bucket_emits_its_points_in_x_order_as_a_stable_sort_would() -> None:
    import itertools
    import math

    from trainmeter.core.decimate import _points

    def by_sort(b):
        pts = []
        if b[2] is not None:
            pts.append((b[1], b[2]))
            if b[3] != b[1] or b[4] != b[2]:
                pts.append((b[3], b[4]))
        if b[5] is not None:
            pts.append((b[5], math.nan))
        return sorted(pts, key=lambda p: p[0])

    xs = (1.0, 2.0, 3.0)
    for x_min, x_max, gap in itertools.product(xs, xs, (None, *xs)):
        for y_min, y_max in ((0.5, 0.5), (0.5, 0.7)):
            b = [2, x_min, y_min, x_max, y_max, gap]
            assert repr(_points(b)) == repr(by_sort(b)), b
    assert _points([1, 4.0, None, 4.0, None, 4.0])[0][0] == 4.0 and _points([1, 4.0, None, 4.0, None, None]) == []
