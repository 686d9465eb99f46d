"""The widget's look that both front ends share: palette, layout ids and tick rule, sent as ``state["look"]``.

Python owns these; js/ reads them from the state (js/src/protocol.ts keeps a copy only for a
state that lacks them, checked against tests/fixtures/state_v2.json by vitest) and the static
snapshot (widget/snapshot.py) draws with the same. docs/protocol.md section 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmeter.widget.ticks import TICK_RULE

if TYPE_CHECKING:  # the wire types: not loaded to build a state
    from trainmeter.widget.protocol import Look

# categorical colours readable on light and dark backgrounds (charts, legends, phases), in drawing order
PALETTE: tuple[str, ...] = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
PHASE_COLOURS: dict[str, str] = {"train": "#4e79a7", "data_wait": "#f28e2b", "eval": "#59a14f",
                                 "checkpoint": "#b07aa1", "reporting": "#76b7b2", "profiling": "#edc948"}
MAIN_CHARTS: tuple[str, ...] = ("loss", "throughput")  # the first screen; the other charts fold into "More charts"
MERGED_PANELS: tuple[str, ...] = ("time",)  # shown inside the phase section, not as panels of their own
MARKER_MAX_POINTS = 40  # a series with at most this many points gets a dot on each (a lone val_loss shows)
FAINT_ALPHA = "55"  # hex alpha of a raw line drawn under its smoothed twin (widget/smoothed.py)


def look() -> Look:
    """The ``look`` entry of the state (a fresh dict: callers may keep it)."""
    return {"palette": list(PALETTE), "phase_colours": dict(PHASE_COLOURS), "main_charts": list(MAIN_CHARTS),
            "merged_panels": list(MERGED_PANELS), "marker_max_points": MARKER_MAX_POINTS,
            "faint_alpha": FAINT_ALPHA,
            "ticks": {"max_ticks": TICK_RULE["max_ticks"], "min_ticks": TICK_RULE["min_ticks"],
                      "linear_steps": list(TICK_RULE["linear_steps"]),
                      "log_steps": [list(m) for m in TICK_RULE["log_steps"]]}}
