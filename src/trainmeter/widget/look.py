"""The widget's look that both front ends share: colours (``colours.json``, which js/src/protocol.ts bundles too),
layout ids and tick rule, sent as ``state["look"]`` (docs/protocol.md section 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainmeter.widget.ticks import TICK_RULE

_COLOURS = json.loads((Path(__file__).parent / "colours.json").read_text(encoding="utf-8"))
PALETTE: tuple[str, ...] = tuple(_COLOURS["palette"])
"""Categorical colours readable on light and dark backgrounds (charts, legends, phases), in drawing order."""
PHASE_COLOURS: dict[str, str] = {phase: PALETTE[i] for phase, i in _COLOURS["phase_palette_index"].items()}
"""Each phase's colour: the palette's, by the index colours.json gives it."""
FIGURE_PALETTE: tuple[str, ...] = tuple(_COLOURS["figure_palette"])
"""The interactive ``tm.compare`` figures' run colours (bqplot), in run order."""
INK: str = _COLOURS["ink"]
"""Axes and tick labels of an SVG chart: reads on light and dark backgrounds (an <img> cannot see the page's CSS)."""
GRID: str = _COLOURS["grid"]
FG: str = _COLOURS["fg"]
MUTED: str = _COLOURS["muted"]
"""Secondary text of the static views (captions, notes, legends)."""
MARKER_COLOUR: str = _COLOURS["marker"]
"""Verdict markers."""
STATUS_COLOURS: dict[str, str] = {"completed": _COLOURS["success"], "failed": _COLOURS["error"],
                                  "interrupted": _COLOURS["warn"], "stopped": _COLOURS["warn"]}
"""A run's status in the static header; the live widget's CSS falls back to the same success, warn, error
and marker colours where the host has none (js/src/protocol.ts sets them on its root)."""
WARNING_COLOUR: str = _COLOURS["warning_text"]
MAIN_CHARTS: tuple[str, ...] = ("loss", "throughput")  # the first screen; the other charts fold into "More charts"
MERGED_PANELS: tuple[str, ...] = ("time",)  # shown inside the phase section, not as panels of their own
MARKER_MAX_POINTS = 40  # a series with at most this many points gets a dot on each (a lone val_loss shows)
FAINT_ALPHA = "55"  # hex alpha of a raw line drawn under its smoothed twin (optim/smoothing.py)


def look() -> dict[str, Any]:
    """The ``look`` entry of the state (it shares this module's dicts: build_state's ``clean`` copies them)."""
    return {"palette": list(PALETTE), "phase_colours": PHASE_COLOURS, "main_charts": list(MAIN_CHARTS),
            "merged_panels": list(MERGED_PANELS), "marker_max_points": MARKER_MAX_POINTS, "faint_alpha": FAINT_ALPHA,
            "ticks": TICK_RULE}
