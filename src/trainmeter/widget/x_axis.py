"""The charts' switchable x axis (step, tokens, time): what Python sends so the front end can map x.

Every chart is drawn against its native x (``step`` or ``time``); the front end's x control
re-draws them against step, tokens or time through two monotone mappings Python sends as
ordinary decimated series in the binary frames (bounded like every series):

- :data:`AXIS_TOKENS` (x = step): cumulative tokens (or samples) counted up to the end of that step;
- :data:`AXIS_TIME` (x = step): wall-clock seconds since the run began at the end of that step
  (the session clock: every phase counts, as on the throughput chart's time axis).

The live publisher adds one point of each at most once a second (the last step read),
the replay one per report (``interval`` records carry ``step``, ``tokens`` and ``elapsed_s``);
the point ``(step 0, 0 tokens, 0 s)`` is implied. Between points the front end interpolates
linearly (exact while tokens per step are steady). ``state["x_axis"]`` carries the labels,
why the tokens axis is off (no tokens counted), and while live the newest point (``head``),
which the decimator's open bucket has not sent yet. Pure functions.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmeter.record.events import IntervalRecord

AXIS_TOKENS = "axis:tokens"
AXIS_TIME = "axis:time_s"
AXIS_SERIES = (AXIS_TOKENS, AXIS_TIME)
TIME_LABEL = "time since start (s, wall clock)"
AXIS_BUDGET_POINTS = 128
"""Points kept per mapping: they are monotone and nearly straight, so 128 place every x to a pixel
while adding at most 4 KB to a history frame (the loss keeps its 2,000)."""
AXIS_EVERY_S = 1.0
"""The live publisher adds a mapping point at most once a second (the state's ``head`` covers the rest)."""


def x_axis_state(*, tokens: int, token_unit: str, head: tuple[int, int, float] | None) -> dict[str, Any]:
    """``state["x_axis"]``: axis labels, the tokens axis' missing input, and the live head point.

    Args:
        tokens: Tokens (or samples) counted so far.
        token_unit: ``"tokens"`` or ``"samples"``.
        head: ``(step, cumulative tokens, seconds)`` of the newest step while live, else ``None``.
    """
    word = "tokens" if token_unit == "tokens" else "samples"
    missing = None if tokens > 0 else (
        f"no {word} counted yet: the {word} axis needs the batches the trained model receives "
        "(counted at its call), or a step with a batch")
    return {"tokens_label": f"{word} (cumulative)", "tokens_missing": missing, "time_label": TIME_LABEL,
            "head": None if head is None else {"step": int(head[0]), "tokens": int(head[1]), "t_s": float(head[2])}}


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float | None:
    """Linear interpolation of a monotone mapping at ``x`` (with the implied origin), ``None`` outside it."""
    px, py = [0.0, *xs], [0.0, *ys]
    if not xs or x < 0 or x > px[-1]:
        return None
    i = bisect.bisect_left(px, x)
    if px[i] == x:
        return float(py[i])
    x0, x1, y0, y1 = px[i - 1], px[i], py[i - 1], py[i]
    return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def report_mapping(record: IntervalRecord, last_step: int) -> tuple[int, float, float | None] | None:
    """``(step, seconds, tokens)`` of the x mappings from an ``interval`` record of the run log.

    ``None`` when the record adds no step past ``last_step`` (the mappings must increase).
    """
    step, tokens, t_s = record.get("step"), record.get("tokens"), record.get("elapsed_s")
    if not isinstance(step, int) or step <= max(0, last_step) or not isinstance(t_s, int | float):
        return None
    return step, float(t_s), float(tokens) if isinstance(tokens, int | float) else None
