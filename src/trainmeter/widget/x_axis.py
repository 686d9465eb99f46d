"""The charts' switchable x axis (step, tokens, time): Python maps every point's x (docs/protocol.md section 3)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

X_MODES = ("step", "tokens", "time")
"""The x control's choices; a frame's mapped columns are named so (``time``: seconds since the start)."""
TIME_LABEL = "time since start (s, wall clock)"
NO_STEP_YET = "waiting for the first steps (the step to tokens/time mapping)"
XMAP_MAX_POINTS = 4096
"""Points an :class:`XMap` keeps (every other one is dropped when full): x mapped within a pixel."""
XMAP_EVERY_S = 1.0
"""The live publisher adds a mapping point at most once a second (the head covers the rest)."""


class XMap:
    """Step -> (cumulative tokens, seconds at its end), linear between points from the implied origin, bounded to
    ``max_points`` (thinned to every other). ``open_end`` (a live run's): a time past the newest point maps to the
    newest step, a step past it is extrapolated; a saved run's maps nothing past its last point. One thread."""

    __slots__ = ("open_end", "max_points", "steps", "tokens", "times", "_head")

    def __init__(self, *, open_end: bool = False, max_points: int = XMAP_MAX_POINTS) -> None:
        self.open_end = open_end
        self.max_points = max(8, max_points)
        self.steps: list[float] = [0.0]
        self.tokens: list[float] = [0.0]
        self.times: list[float] = [0.0]
        self._head: tuple[float, float, float] | None = None

    @property
    def empty(self) -> bool:
        """Whether no step past the origin is known."""
        return self._head is None and len(self.steps) == 1

    def add(self, step: float, tokens: float, t_s: float) -> None:
        """Keep the point ``(step, tokens, t_s)`` (ignored unless past the newest kept step)."""
        if not step > self.steps[-1]:
            return
        self.steps.append(float(step))
        self.tokens.append(float(tokens))
        self.times.append(max(float(t_s), self.times[-1]))
        if self._head is not None and self._head[0] <= step:
            self._head = None
        if len(self.steps) > self.max_points:  # every other point, and the newest
            self.steps, self.tokens, self.times = (c[:-1:2] + c[-1:] for c in (self.steps, self.tokens, self.times))

    def set_head(self, step: float, tokens: float, t_s: float) -> None:
        """The newest step read (not kept as a point until :meth:`add`)."""
        if step > self.steps[-1]:
            self._head = (float(step), float(tokens), max(float(t_s), self.times[-1]))

    def columns(self, x_kind: str, xs: Sequence[float]) -> dict[str, list[float]]:
        """``xs`` (of native kind ``x_kind``) on the other axes, by mode; NaN where the map cannot place one."""
        steps, tokens, times = self.steps, self.tokens, self.times
        if self._head is not None:  # the newest step read
            steps, tokens, times = ([*c, h] for c, h in zip((steps, tokens, times), self._head, strict=True))
        if x_kind == "step":
            return dict(zip(("tokens", "time"), _interp(steps, xs, "extrapolate" if self.open_end else "none",
                                                        tokens, times), strict=True))
        return dict(zip(("step", "tokens"), _interp(times, xs, "clamp" if self.open_end else "none", steps, tokens),
                        strict=True))

    def point(self, step: float) -> dict[str, float | None]:
        """``{"tokens", "time"}`` at ``step`` (``None`` where unmapped): a marker's x on the other axes."""
        cols = self.columns("step", [step])
        return {k: (None if math.isnan(v[0]) else v[0]) for k, v in cols.items()}


def _interp(table: list[float], xs: Sequence[float], past: str, *columns: list[float]) -> list[list[float]]:
    """Each of ``columns`` at each x of ``xs`` in the non-decreasing ``table``: linear between its rows; NaN before
    the origin, or past the end with ``past`` ``"none"`` (``"clamp"``: the last row; ``"extrapolate"``: along the
    last segment). ``xs`` in order costs no search."""
    n, last = len(table), table[-1]
    out: list[list[float]] = [[] for _ in columns]
    i = 0
    for x in map(float, xs):
        if not x >= 0.0 or (x > last and (past == "none" or (past == "extrapolate" and n == 1))):
            at = None  # NaN, before the origin, or past the end
        elif x >= last:
            at = (n - 1, 0.0) if x == last or past == "clamp" else (n - 2, (x - table[-2]) / (last - table[-2]))
        else:
            if not table[i] <= x < table[i + 1]:
                i = bisect.bisect_right(table, x) - 1
            at = (i, (x - table[i]) / (table[i + 1] - table[i]))
        j, f = at or (0, math.nan)
        for column, ys in zip(out, columns, strict=True):
            column.append(math.nan if at is None else ys[j] if f == 0.0 else ys[j] + (ys[j + 1] - ys[j]) * f)
    return out


def x_axis_state(*, tokens: int, token_unit: str, mapped: bool) -> dict[str, Any]:
    """``state["x_axis"]``: axis labels, and why the tokens and time axes are off (``None`` when on); ``mapped``:
    whether the x map has a step past the origin."""
    word = "tokens" if token_unit == "tokens" else "samples"
    missing = None if tokens > 0 else (
        f"no {word} counted yet: the {word} axis needs the batches the trained model receives "
        "(counted at its call), or a step with a batch")
    return {"tokens_label": f"{word} (cumulative)", "tokens_missing": missing, "time_label": TIME_LABEL,
            "time_missing": None if mapped else NO_STEP_YET}


def place_markers(markers: list[dict[str, Any]], x_map: XMap | None) -> list[dict[str, Any]]:
    """The markers with ``at``: their step's x on the tokens and time axes (``None`` where unmapped)."""
    if x_map is None:
        return markers
    return [{**m, "at": x_map.point(float(m["step"]))} for m in markers]


def report_mapping(record: dict[str, Any], last_step: int) -> tuple[int, float, float | None] | None:
    """``(step, seconds, tokens)`` of the x map from an ``interval`` record; ``None`` when not past ``last_step``."""
    step, tokens, t_s = record.get("step"), record.get("tokens"), record.get("elapsed_s")
    if not isinstance(step, int) or step <= max(0, last_step) or not isinstance(t_s, int | float):
        return None
    return step, float(t_s), float(tokens) if isinstance(tokens, int | float) else None
