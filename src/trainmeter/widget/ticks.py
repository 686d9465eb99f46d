"""Axis ticks people can read (docs/spec.md section 12); :data:`TICK_RULE` goes to js/src/ticks.ts in the state's
``look`` (tests/fixtures/ticks_v1.json is checked by pytest and vitest alike). Pure functions."""

from __future__ import annotations

import math
from typing import Any

MAX_TICKS = 6
MIN_TICKS = 4
# linear steps times a power of ten, by preference; the last (2.5) only when nothing else fits
LINEAR_STEPS = (1.0, 2.0, 5.0, 2.5)
# denser first: the first set that gives at most MAX_TICKS labels inside the data wins
_LOG_MULTS = ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0), (1.0, 2.0, 4.0, 6.0, 8.0), (1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))
TICK_RULE: dict[str, Any] = {"max_ticks": MAX_TICKS, "min_ticks": MIN_TICKS, "linear_steps": list(LINEAR_STEPS),
                        "log_steps": [list(m) for m in _LOG_MULTS]}


def linear_ticks(lo: float, hi: float, *, max_ticks: int = MAX_TICKS) -> list[float]:
    """Round values inside ``[lo, hi]``: 4 to ``max_ticks`` of them, 5 when possible, stepping 1, 2, 5 (or 2.5
    when nothing else fits) times a power of ten: ``(2.13, 2.61)`` -> 2.2 to 2.6 by 0.1 (more in ticks_v1.json)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        return [lo]
    top = math.floor(math.log10(hi - lo))
    best: tuple[float, list[float]] | None = None
    for power in range(top - 2, top + 2):
        for rank, mult in enumerate(LINEAR_STEPS):
            step = mult * 10.0**power
            inside = range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)  # its multiples in the span
            ticks = [float(f"{k * step:.12g}") for k in inside]
            if not 2 <= len(ticks) <= max_ticks:
                continue
            # 4..max_ticks labels first (5 best), then as many as fit; 2.5 steps only when they help
            short = max(0, MIN_TICKS - len(ticks))
            score = 10 * short + abs(len(ticks) - 5) + (1.5 if rank == len(LINEAR_STEPS) - 1 else 0.0)
            if best is None or score < best[0]:
                best = (score, ticks)
    return best[1] if best is not None else [lo, hi]


def log_ticks(lo: float, hi: float, *, max_ticks: int = MAX_TICKS) -> list[float]:
    """Labelled values for a log axis over ``[lo, hi]`` (both > 0): each decade's 1-2-5 sequence, thinned to
    ``max_ticks``; linear steps under a factor of 3, or where the densest sequence gives fewer than 4: ``(0.05, 40)``
    -> 0.1, 0.3, 1, 3, 10, 30 (more in ticks_v1.json)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
        return []
    if hi < lo:
        lo, hi = hi, lo
    if hi / lo < 3.0:
        return linear_ticks(lo, hi, max_ticks=max_ticks)
    for i, mults in enumerate(_LOG_MULTS):
        decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        values = (float(f"{m * 10.0 ** e:.12g}") for e in decades for m in mults)
        ticks = [v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        if i == 0 and len(ticks) < MIN_TICKS:  # under a decade or so: round linear values read better
            return linear_ticks(lo, hi, max_ticks=max_ticks)
        if 2 <= len(ticks) <= max_ticks:
            return ticks
    # many decades: every k-th power of ten
    e0, e1 = math.ceil(math.log10(lo)), math.floor(math.log10(hi))
    stride = max(1, math.ceil((e1 - e0 + 1) / max_ticks))
    return [float(f"{10.0 ** e:.12g}") for e in range(e0, e1 + 1, stride)]
