"""How the training loss stands, said plainly (docs/spec.md section 12): the newest point's ``nan``/``inf`` when it
was not finite (never "no loss found" nor an earlier finite value), and the run's ``loss_state`` field, ``nonfinite``
or ``diverged`` (the loss now above :data:`DIVERGED_RATIO` times its lowest and at least half its highest: it went
back up to where it started or beyond, not a noisy step of a converged run), that colours the status. Pure, any
thread.
"""

from __future__ import annotations

import math
from typing import Any

DIVERGED_RATIO = 10.0
UNKNOWN_KIND = "nan/inf"  # a saved run's record keeps that the point was not finite, not which


def nonfinite_text(value: float) -> str:
    """``nan``, ``inf`` or ``-inf``: how Python prints the value (the text line's spelling)."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def newest_nonfinite(stats: Any) -> str | None:
    """The live series' newest point as text (its :class:`~trainmeter.core.series.SeriesStats`) when not finite."""
    value = stats.last_read
    return None if value is None or math.isfinite(value) else nonfinite_text(value)


def saved_nonfinite(entry: dict[str, Any]) -> str | None:
    """A passport's ``series.train_loss`` entry: :data:`UNKNOWN_KIND` when its newest point was not finite."""
    return UNKNOWN_KIND if entry.get("last") is None and entry.get("nonfinite") else None


def loss_state(last: float | None, lowest: float | None, highest: float | None, nonfinite: str | None) -> str | None:
    """``nonfinite``, ``diverged`` or ``None`` (the loss as it should be, or none read)."""
    if nonfinite is not None:
        return "nonfinite"
    if None in (last, lowest, highest) or lowest <= 0:  # type: ignore[operator]
        return None
    return "diverged" if last > DIVERGED_RATIO * lowest and last >= highest / 2 else None  # type: ignore[operator]
