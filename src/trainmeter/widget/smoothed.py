"""The smoothed training loss the loss chart draws: the text line's EMA over every step, as its own series
``train_loss.ema`` (docs/spec.md sections 12 and 18). A live run's trace shares the optim wing's
:class:`~trainmeter.optim.smoothing.EmaCursor` fold, so each point is folded once and the line passes through the text
line's ``(ema ...)``; a replay folds the run log's points. Only the training loss has a twin. One reader per instance
(not thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trainmeter.optim.smoothing import EMA_BETA, LossEma

SMOOTHED: dict[str, str] = {"train_loss": "train_loss.ema"}  # raw series -> its smoothed twin
TWINS = frozenset(SMOOTHED.values())
WINDOW_POINTS = round(1.0 / (1.0 - EMA_BETA))  # the EMA's window (50 points at beta 0.98)


def twins_drawn(raw_points: dict[str, int]) -> dict[str, str]:
    """The chart spec's ``smoothed`` map: a twin only for a series with at least :data:`WINDOW_POINTS` points (below
    its window an EMA is mostly its first points)."""
    return {n: t for n, t in SMOOTHED.items() if raw_points.get(n, 0) >= WINDOW_POINTS}


class LossSmoother:
    """The smoothed twin of the raw series in :data:`SMOOTHED`, fed in step order; ``shared`` returns the live run's
    loss EMA fold (``EmaCursor``) or ``None``, used for ``train_loss`` points read with their position."""

    def __init__(self, shared: Callable[[], Any] | None = None) -> None:
        self._ema = LossEma()
        self._shared = shared
        self._at: int | None = 0  # position the train_loss fold reached (None: it skipped points, shares no more)

    def twin(self, name: str, values: Sequence[float], start: int | None = None) -> tuple[str, list[float]] | None:
        """``(twin name, smoothed values)`` for new points of ``name``, or ``None`` when it has no twin; ``start``: the
        series position of ``values[0]`` (a live read: the fold is shared with the text line's)."""
        twin = SMOOTHED.get(name)
        if twin is None:
            return None
        ema = self._ema
        fold = self._shared() if self._shared is not None and start is not None else None
        if fold is None or fold.ema.beta != ema.beta:
            return twin, ema.trace(list(map(float, values)))
        if start != self._at:
            self._at = None  # points were skipped (trimmed before this read): a fold of its own from here
        at, avg, count = fold.state()
        if self._at is not None and at == start:
            ema.resume(avg, count)  # the fold reached the same point: continue from its state
        out = ema.trace(list(map(float, values)))
        if self._at is not None:
            self._at = start + len(values)
            fold.publish((self._at, *ema.raw))
        return twin, out
