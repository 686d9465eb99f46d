"""The smoothed loss beside the raw one: a bias-corrected EMA over steps, ``beta = 0.98`` (docs/spec.md section 2).
Not thread-safe: one writer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

EMA_BETA = 0.98


class LossEma:
    """Bias-corrected EMA of per-step losses; ``beta`` (the last average's weight) in ``[0, 1)``, else ValueError."""

    def __init__(self, beta: float = EMA_BETA) -> None:
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"EMA beta must be in [0, 1), got {beta!r}")
        self.beta = beta
        self._avg = 0.0
        self.count = 0
        settled = 1
        while 1.0 - beta**settled != 1.0:  # past it the bias correction divides by exactly 1.0
            settled += 1
        self._settled = settled

    def update(self, losses: Iterable[float]) -> None:
        """Fold in losses in step order (non-finite ones skipped): bit for bit one ``beta * avg + (1 - beta) * loss``
        per loss, four a loop turn after C-level passes (docs/spec.md section 20)."""
        beta = self.beta
        values = losses if isinstance(losses, list) else list(losses)
        try:
            scaled = list(map((1.0 - beta).__mul__, filter(math.isfinite, values)))
        except (TypeError, OverflowError):  # not all floats: one loss at a time
            self._update_each(values)
            return
        n = len(scaled)
        cut = n - n % 4
        avg = self._avg
        quads = iter(scaled[:cut])
        for a, b, c, d in zip(quads, quads, quads, quads, strict=True):
            avg = beta * (beta * (beta * (beta * avg + a) + b) + c) + d
        for a in scaled[cut:]:
            avg = beta * avg + a
        self._avg, self.count = avg, self.count + n

    def _update_each(self, losses: Iterable[float]) -> None:
        beta, avg, n = self.beta, self._avg, self.count
        for loss in losses:
            if math.isfinite(loss):
                avg = beta * avg + (1.0 - beta) * loss
                n += 1
        self._avg, self.count = avg, n

    def trace(self, losses: Iterable[float]) -> list[float]:
        """Fold in losses in step order; the bias-corrected average after each one, bit for bit :attr:`value`'s (NaN
        for a skipped non-finite loss: a gap on the chart). Past ``1 - beta**n == 1.0`` the correction is left out."""
        beta, avg, n = self.beta, self._avg, self.count
        keep = 1.0 - beta
        values = losses if isinstance(losses, list) else list(losses)
        out: list[float] = []
        append = out.append
        if n >= self._settled and all(map(math.isfinite, values)):
            for a in map(keep.__mul__, values):
                avg = beta * avg + a
                append(avg)
            self._avg, self.count = avg, n + len(values)
            return out
        for loss in values:
            if math.isfinite(loss):
                avg = beta * avg + keep * loss
                n += 1
                append(avg if n >= self._settled else avg / (1.0 - beta**n))
            else:
                append(math.nan)
        self._avg, self.count = avg, n
        return out

    @property
    def raw(self) -> tuple[float, int]:
        """The fold's state: the average before bias correction and the finite losses folded."""
        return self._avg, self.count

    def resume(self, avg: float, count: int) -> None:
        """Continue from a fold state :attr:`raw` gave (the same fold, reached by another reader)."""
        self._avg, self.count = avg, count

    @property
    def value(self) -> float | None:
        """The bias-corrected average, or ``None`` before the first finite loss."""
        if self.count == 0:
            return None
        return self._avg / (1.0 - self.beta**self.count)


class EmaCursor:
    """A :class:`LossEma` over one series' points, folded once by whoever folds first (docs/spec.md sections 18, 20):
    the widget's trace (:meth:`publish`), the report worker between reports (:meth:`fold_ahead`), a report up to its
    end (:meth:`fold_to_end`, which sets :attr:`ema`). Each fold starts from the furthest published state, so the
    value at a report is, bit for bit, a fold of every point up to it.

    Thread safety: no lock (a fork leaves none held); each slot holds an immutable ``(position, average, count)``
    replaced whole. ``_reported`` (the report's) has one writer at a time; ``_ahead`` has two (the worker's idle fold
    and the widget's :meth:`publish`): either may overwrite a further state with a shorter one, which is still the
    fold of a prefix, so a later fold from it reaches the same value bit for bit.
    """

    def __init__(self, ema: LossEma) -> None:
        self.ema = ema
        self._ahead: tuple[int, float, int] = (0, 0.0, 0)
        self._reported: tuple[int, float, int] = (0, 0.0, 0)

    def _fold(self, series: Any, contiguous: bool, stop: int | None = None) -> tuple[int, float, int] | None:
        ahead, reported = self._ahead, self._reported
        pos, avg, count = ahead if ahead[0] > reported[0] and (stop is None or ahead[0] <= stop) else reported
        end, _, _, values = series.read(pos)
        if contiguous and end - len(values) != pos:
            return None  # a report trimmed past this state meanwhile: its own state is further
        if stop is not None and end > stop:  # a report read later: the points past its end came after it
            values = values[:max(0, len(values) - (end - stop))]
            end = stop
        folded = LossEma(self.ema.beta)
        folded._avg, folded.count = avg, count
        folded.update(values)
        return (end, folded._avg, folded.count)

    def fold_ahead(self, series: Any) -> None:
        """Fold the points appended since the furthest state (the report worker's thread)."""
        state = self._fold(series, contiguous=True) if series is not None else None
        if state is not None:
            self._ahead = state

    def state(self) -> tuple[int, float, int]:
        """The furthest published fold state ``(position, average, count)`` (any thread)."""
        ahead, reported = self._ahead, self._reported
        return ahead if ahead[0] > reported[0] else reported

    def publish(self, state: tuple[int, float, int]) -> None:
        """Offer the state a fold of the first ``state[0]`` points reached elsewhere (the widget's trace, which
        folds every point as it draws it: widget/smoothed.py); kept when it is the furthest. Any thread."""
        if state[0] > self.state()[0]:
            self._ahead = state

    def settle(self, series: Any, stop: int) -> int:
        """Fold up to position ``stop`` into the state no later report goes behind (a drain between reports: the
        report worker, after every report before it; docs/spec.md section 18); returns the position folded to, from
        which on the series' points are still needed."""
        if stop > self._reported[0]:  # a report on the training thread may have folded past it meanwhile
            state = self._fold(series, contiguous=False, stop=stop)
            if state is not None:
                self._reported = state
        return self._reported[0]

    @property
    def needed_from(self) -> int:
        """The first position a later fold may read (the points before it may be trimmed)."""
        return self._reported[0]

    def fold_to_end(self, series: Any, stop: int | None = None) -> None:
        """Fold every point up to the series' end (or position ``stop``: the report's end, for a report read
        later on the report worker) and set :attr:`ema` (a report: the training thread, or the worker)."""
        state = self._fold(series, contiguous=False, stop=stop)
        if state is not None:
            self._reported = state
            self.ema._avg, self.ema.count = state[1], state[2]
