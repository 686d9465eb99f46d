"""Bounded, decimated history of one series: min/max per bucket, doubling bucket width (docs/spec.md section 12).

Buckets of ``width`` raw points keep their minimum, maximum and one gap point (NaN or inf); past the budget the width
doubles and buckets merge pairwise. Not thread-safe: a live run's are used under their view's lock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from operator import itemgetter

DEFAULT_BUDGET_POINTS = 2000
_NAN = math.nan
# A bucket: [n_raw, x_min, y_min, x_max, y_max, x_gap]; y_min/y_max are None when the
# bucket holds no finite value, x_gap is None when it holds no non-finite one.
Bucket = list


def _widen(b: Bucket, x_lo: float, y_lo: float, x_hi: float, y_hi: float) -> None:
    """Take a lower minimum ``(x_lo, y_lo)`` and a higher maximum ``(x_hi, y_hi)`` into ``b`` (the first kept)."""
    if b[2] is None:
        b[1], b[2], b[3], b[4] = x_lo, y_lo, x_hi, y_hi
        return
    if y_lo < b[2]:
        b[1], b[2] = x_lo, y_lo
    if y_hi > b[4]:
        b[3], b[4] = x_hi, y_hi


def _combine(buckets: Sequence[Bucket]) -> Bucket:
    """Merge consecutive buckets into one (keeps the first minimum/maximum/gap)."""
    out = list(buckets[0])
    for b in buckets[1:]:
        out[0] += b[0]
        if b[2] is not None:
            _widen(out, b[1], b[2], b[3], b[4])
        if out[5] is None:
            out[5] = b[5]
    return out


def _points(b: Bucket) -> list[tuple[float, float]]:
    """The 1-3 points a bucket emits, in x order (a gap is a NaN y; equal xs keep min, max, gap order)."""
    if b[2] is None:
        return [] if b[5] is None else [(b[5], _NAN)]
    low = (b[1], b[2])
    if b[3] == b[1] and b[4] == b[2]:
        pts = [low]
    else:
        pts = [low, (b[3], b[4])] if b[1] <= b[3] else [(b[3], b[4]), low]
    if b[5] is not None:
        bisect.insort(pts, (b[5], _NAN), key=itemgetter(0))  # after the points at its x
    return pts


class Decimator:
    """Min/max decimation of series ``name`` to at most ``budget_points`` (>= 8) points; ``width``: raw points per
    bucket (a power of two); ``count``: raw points seen."""

    __slots__ = ("name", "x_kind", "budget_points", "width", "count", "_closed", "_closed_points", "_open", "_taken",
                 "_last_x")

    def __init__(self, name: str, x_kind: str = "step", *, budget_points: int = DEFAULT_BUDGET_POINTS) -> None:
        if budget_points < 8:
            raise ValueError(f"budget_points must be at least 8, got {budget_points}")
        self.name = name
        self.x_kind = x_kind
        self.budget_points = budget_points
        self.width = 1
        self.count = 0
        self._closed: list[Bucket] = []
        self._closed_points = 0
        self._open: Bucket | None = None
        self._taken = 0
        self._last_x = -math.inf  # x of the last point taken (take_new sends only what lies past it)

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        """Add a chunk of points (x non-decreasing)."""
        if len(xs) != len(ys):
            raise ValueError(f"series {self.name!r}: {len(xs)} xs but {len(ys)} ys")
        i, n = 0, len(ys)
        while i < n:
            if self._open is None:
                self._open = [0, None, None, None, None, None]
            b = self._open
            k = min(self.width - b[0], n - i)
            self._fill(b, xs, ys, i, k)
            i += k
            if b[0] >= self.width:
                self._close(b)
                if self._closed_points > self.budget_points - 3:  # (the open bucket may add up to 3 points)
                    self._double_while(lambda: self._closed_points > (self.budget_points - 3) // 2 + 3)  # half of it
        self.count += n

    def _fill(self, b: Bucket, xs: Sequence[float], ys: Sequence[float], i: int, k: int) -> None:
        vals = [float(v) for v in ys[i:i + k]]
        total = sum(vals)
        b[0] += k
        if total - total == 0.0:  # every value finite (a NaN, an inf or an overflow fails this)
            lo, hi = min(vals), max(vals)
            _widen(b, float(xs[i + vals.index(lo)]), lo, float(xs[i + vals.index(hi)]), hi)
        else:  # point by point
            for j in range(k):
                x, y = float(xs[i + j]), vals[j]
                if y - y == 0.0:  # finite
                    _widen(b, x, y, x, y)
                elif b[5] is None:
                    b[5] = x

    def _close(self, b: Bucket) -> None:  # the open bucket ``b``
        self._open = None
        self._closed.append(b)
        self._closed_points += len(_points(b))

    def coarsen(self, width: float) -> None:
        """Double the width until it is at least ``width`` raw points (widget/feed.py)."""
        self._double_while(lambda: self.width < width)

    def _double_while(self, more: Callable[[], bool]) -> None:
        """Double the width while ``more()``: merge closed buckets pairwise (an odd last one joins the open one)."""
        taken = self._taken
        while more():
            closed = self._closed
            taken //= 2
            merged = [_combine(closed[j:j + 2]) for j in range(0, len(closed) - 1, 2)]
            if len(closed) % 2:
                tail = [closed[-1]] if self._open is None else [closed[-1], self._open]
                self._open = _combine(tail)
            self.width *= 2
            self._closed = merged
            self._closed_points = sum(len(_points(b)) for b in merged)
            if self._open is not None and self._open[0] >= self.width:
                self._close(self._open)
        self._taken = taken

    points = property(lambda self: self._closed_points + (len(_points(self._open)) if self._open is not None else 0),
                      doc="Points :meth:`columns` would return with the open bucket.")

    def columns(self, *, include_open: bool = True, max_points: int | None = None) -> tuple[list[float], list[float]]:
        """The decimated history as ``(xs, ys)`` (gaps: NaN ys), coarsened further to at most ``max_points``."""
        buckets = list(self._closed)
        if include_open and self._open is not None:
            buckets.append(self._open)
        return _columns(buckets, max_points)

    def take_new(self) -> tuple[list[float], list[float]]:
        """The closed buckets' points not taken yet (past the last one taken); they are taken now."""
        new = self._closed[self._taken:]
        self._taken = len(self._closed)
        xs, ys = _columns(new, None)
        last = self._last_x
        if xs and xs[0] <= last:  # a merged bucket whose first half was taken before the re-bucket
            keep = [i for i, x in enumerate(xs) if x > last]
            xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
        if xs:
            self._last_x = xs[-1]
        return xs, ys

    def mark_all_taken(self) -> None:
        """Mark every closed bucket as taken (after a full frame of the closed buckets was sent)."""
        self._taken = len(self._closed)
        self._last_x = next((pts[-1][0] for b in reversed(self._closed) if (pts := _points(b))), self._last_x)

    pending = property(lambda self: len(self._closed) - self._taken, doc="Closed buckets not taken yet.")


def _columns(buckets: list[Bucket], max_points: int | None) -> tuple[list[float], list[float]]:
    merged, factor = buckets, 1  # merged: the buckets taken ``factor`` at a time
    while max_points is not None and sum(len(_points(b)) for b in merged) > max_points and factor < len(buckets):
        factor *= 2
        merged = [_combine(buckets[j:j + factor]) for j in range(0, len(buckets), factor)]
    pts = [p for b in merged for p in _points(b)]
    return [x for x, _ in pts], [y for _, y in pts]


def decimate(xs: Sequence[float], ys: Sequence[float], budget_points: int) -> tuple[list[float], list[float]]:
    """Decimate whole columns to at most ``budget_points`` points (min/max per bucket)."""
    d = Decimator("", budget_points=budget_points)
    d.extend(xs, ys)
    return d.columns(include_open=True)


def share_budget(needs: dict[str, int], total_points: int, per_series: int = DEFAULT_BUDGET_POINTS,
                 floor_points: int = 64) -> dict[str, int]:
    """Split ``total_points`` among series by water-filling: small series keep every point, the rest share what is
    left equally (at most ``per_series``, at least ``floor_points`` or ``total_points // len(needs)``, at least 2).

    Examples:
        >>> share_budget({"loss": 2000, "lr": 2000, "val": 40}, 3000)
        {'val': 40, 'loss': 1480, 'lr': 1480}
    """
    caps: dict[str, int] = {}
    remaining = total_points
    ordered = sorted(needs.items(), key=lambda kv: kv[1])
    # the floor never lets the sum pass the total: with many series each keeps at least a min/max pair
    floor_points = max(2, min(floor_points, total_points // max(1, len(ordered))))
    for i, (name, need) in enumerate(ordered):
        share = max(floor_points, remaining // (len(ordered) - i))
        caps[name] = min(need, share, per_series)
        remaining = max(0, remaining - caps[name])
    return caps
