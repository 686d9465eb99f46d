"""The smoothed training loss the loss chart draws over the raw one: an EMA whose window grows with the run, as its
own series ``train_loss.ema`` (docs/spec.md section 12).

The window is :data:`WINDOW_SHARE` of the points folded so far (the newest point's weight is ``1 / window``), so a
point at step ``n`` averages about the last ``n / 20`` steps: light early, when the loss falls fastest, and the same
share of the x axis at any length, the way W&B's default (time-weighted EMA) scales its decay to the x range.
TensorBoard's default (0.6 per logged point) would be about 2.5 points at any length. The text line's ``(ema ...)``
is its own figure (beta 0.98, section 2). Below :data:`MIN_POINTS` points no twin is drawn. A NaN or inf is a gap and
leaves the average as it was. One reader per instance (not thread-safe); a replay folds the run log's points, the
same values a live run drew.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SMOOTHED: dict[str, str] = {"train_loss": "train_loss.ema"}  # raw series -> its smoothed twin
TWINS = frozenset(SMOOTHED.values())
WINDOW_SHARE = 0.05  # the window: this share of the points so far
MIN_POINTS = 100  # the first point whose window is 5 points; below it the raw loss is drawn alone


def twins_drawn(raw_points: dict[str, int]) -> dict[str, str]:
    """The chart spec's ``smoothed`` map: a twin only for a series with at least :data:`MIN_POINTS` points."""
    return {n: t for n, t in SMOOTHED.items() if raw_points.get(n, 0) >= MIN_POINTS}


def twin_label(steps: int) -> str:
    """The twin's legend label, its window in steps at the newest point (``steps``: the run's last step)."""
    return f"smoothed (EMA, ~{max(1, round(WINDOW_SHARE * steps)):,} steps)"


def smoothed_spec(loss_points: int, steps: int) -> dict[str, dict[str, str]]:
    """The loss chart's ``smoothed`` map and the twin's label (docs/spec.md section 12)."""
    twins = twins_drawn({"train_loss": loss_points})
    return {"smoothed": twins, "labels": {t: twin_label(steps) for t in twins.values()}}


class LossSmoother:
    """The smoothed twin of the raw series in :data:`SMOOTHED`, fed every point in step order."""

    def __init__(self) -> None:
        self._avg = 0.0
        self._count = 0  # finite points folded

    def twin(self, name: str, values: Sequence[float], start: int | None = None) -> tuple[str, list[float]] | None:
        """``(twin name, smoothed values)`` for new points of ``name``, or ``None`` when it has no twin (``start``,
        the position of ``values[0]``, is not needed: every point comes once, in order)."""
        twin = SMOOTHED.get(name)
        if twin is None:
            return None
        avg, n, out = self._avg, self._count, []
        for v in map(float, values):
            if not math.isfinite(v):
                out.append(math.nan)
                continue
            n += 1
            weight = min(1.0, 1.0 / (WINDOW_SHARE * n))  # 1 for the first 20 points: the average is the point
            avg += weight * (v - avg)
            out.append(avg)
        self._avg, self._count = avg, n
        return twin, out
