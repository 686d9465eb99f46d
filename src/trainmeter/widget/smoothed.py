"""The smoothed training loss the loss chart draws: the text line's EMA over every step, as its own series.

``train_loss.ema`` holds, at each step, the bias-corrected EMA (optim/smoothing.py, beta
:data:`~trainmeter.optim.smoothing.EMA_BETA`) of every ``train_loss`` point up to it: the publisher folds each new point
as it reads it, a replay folds the run log's points, so at a report's step the line passes through the text line's
``(ema ...)``. The front end smooths nothing; it draws the raw series faint under its twin (``smoothed`` in the chart
spec). Only the training loss has a twin: a validation loss has a few points and a learning rate is not noisy. One
reader per instance (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainmeter.optim.smoothing import EMA_BETA, LossEma

SMOOTHED: dict[str, str] = {"train_loss": "train_loss.ema"}  # raw series -> its smoothed twin
TWINS = frozenset(SMOOTHED.values())
WINDOW_POINTS = round(1.0 / (1.0 - EMA_BETA))  # the EMA's window (50 points at beta 0.98)


def twins_drawn(raw_points: dict[str, int]) -> dict[str, str]:
    """The chart spec's ``smoothed`` map: a twin only for a series with at least :data:`WINDOW_POINTS` points.

    Below its window an EMA is mostly its first points, so the chart draws the raw values alone.
    """
    return {n: t for n, t in SMOOTHED.items() if raw_points.get(n, 0) >= WINDOW_POINTS}


class LossSmoother:
    """The smoothed twins of the raw series in :data:`SMOOTHED`, fed in step order."""

    def __init__(self) -> None:
        self._emas: dict[str, LossEma] = {}

    def twin(self, name: str, values: Sequence[float]) -> tuple[str, list[float]] | None:
        """``(twin name, smoothed values)`` for new points of ``name``, or ``None`` when it has no twin."""
        twin = SMOOTHED.get(name)
        if twin is None:
            return None
        ema = self._emas.get(name)
        if ema is None:
            ema = self._emas[name] = LossEma()
        return twin, ema.trace(list(map(float, values)))
