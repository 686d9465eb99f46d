"""The smoothed training loss: one rule, one fold, read by the text line, the passport and the chart's twin
(docs/spec.md section 2).

The rule: an EMA whose window is :data:`WINDOW_SHARE` of the points folded so far (the newest point's weight is
``1 / (0.05 n)``, 1 for the first 20 points), so a point at step ``n`` averages about the last ``n / 20`` steps: light
early, when the loss falls fastest, and the same share of the x axis at any length, as W&B's default time-weighted EMA
scales its decay to the x range (TensorBoard's default, 0.6 per logged point, is about 2.5 points at any length; a
fixed beta 0.98 read 0.81 at step 250 of 1,150 where the loss was 0.45: section 12). A NaN or inf is a gap in the
twin and leaves the average as it was. The run's one fold is the optim wing's :class:`LossEma`, the twin deriver of
the run's decimated views (core/series_views.py): each point is folded once, off the training thread, on whichever
thread catches the views up (the publisher's tick, the report worker; the first and final reports their own). A
replay folds a saved run's points by the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

LOSS_SERIES = "train_loss"
SMOOTHED: dict[str, str] = {LOSS_SERIES: "train_loss.ema"}  # raw series -> its smoothed twin
WINDOW_SHARE = 0.05  # the window: this share of the points so far
MIN_POINTS = 100  # the first point whose window is 5 points; below it the chart draws the raw loss alone
RULE = "EMA of train_loss, window 5% of the points so far (newest weight 1/(0.05 n)); non-finite points skipped"


def window_steps(span_steps: float) -> int:
    """The window in steps of a fold over ``span_steps`` steps of points (at least 1)."""
    return max(1, round(WINDOW_SHARE * span_steps))


def twin_label(steps: int) -> str:
    """The twin's legend label, its window in steps at the newest point (``steps``: the steps its points span)."""
    return f"smoothed (EMA, ~{window_steps(steps):,} steps)"


def smoothed_spec(loss_points: int, steps: int) -> dict[str, dict[str, str]]:
    """The loss chart's ``smoothed`` map and the twin's label: a twin from :data:`MIN_POINTS` points on (section 12)."""
    twins = SMOOTHED if loss_points >= MIN_POINTS else {}
    return {"smoothed": dict(twins), "labels": {t: twin_label(steps) for t in twins.values()}}


class LossEma:
    """The fold of :data:`LOSS_SERIES`'s points in step order by the rule above.

    Thread safety: one writer (:meth:`twin`, under the views' lock); the state is one tuple replaced whole, so
    :attr:`count` and :meth:`to_dict` read from any thread agree with one another.
    """

    def __init__(self) -> None:
        self._state: tuple[float, int, Any, Any] = (0.0, 0, None, None)  # average, finite points, first, last step

    def twin(self, name: str, steps: Sequence[Any], values: Sequence[float]) -> tuple[str, list[float]] | None:
        """Fold new points of ``name`` (``steps`` their x); ``(twin name, the average after each point)``, NaN at a
        non-finite one, or ``None`` for a series with no twin (the views' twin deriver)."""
        twin = SMOOTHED.get(name)
        if twin is None:
            return None
        avg, n, first, last = self._state
        out = []
        for x, v in zip(steps, map(float, values), strict=True):
            if not math.isfinite(v):
                out.append(math.nan)
                continue
            n += 1
            avg += min(1.0, 1.0 / (WINDOW_SHARE * n)) * (v - avg)  # 1 for the first 20 points: the point itself
            first = x if first is None else first
            last = x
            out.append(avg)
        self._state = (avg, n, first, last)
        return twin, out

    @property
    def count(self) -> int:
        """Finite points folded."""
        return self._state[1]

    def to_dict(self) -> dict[str, Any]:
        """The run log's ``interval.optim.loss_ema``: ``value``, ``step``, ``window_steps`` (all None before a point)."""
        avg, n, first, last = self._state
        return {"value": avg if n else None, "step": last, "window_steps": window_steps(last - first + 1) if n else None}
