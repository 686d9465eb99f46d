"""The widget's look that both front ends share (docs/protocol.md section 1), sent as ``state["look"]``: colours
(``colours.json``, which js/src/protocol.ts bundles too), layout ids, the axis tick rule (:data:`TICK_RULE`, applied by
js/src/ticks.ts), and the series' human labels with their units (each chart spec's ``labels``). Pure functions."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


# -- axis ticks people can read (docs/spec.md section 12; tests/fixtures/ticks_v1.json: pytest and vitest check it)
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


LOOK: dict[str, Any] = {"palette": list(PALETTE), "phase_colours": PHASE_COLOURS, "main_charts": list(MAIN_CHARTS),
                        "merged_panels": list(MERGED_PANELS), "marker_max_points": MARKER_MAX_POINTS,
                        "faint_alpha": FAINT_ALPHA, "ticks": TICK_RULE}
"""The state's ``look`` entry (shared: build_state's ``clean`` copies it)."""


# -- series labels (docs/spec.md section 12) -------------------------------------------------------------------------
_FIXED: dict[str, str] = {
    "train_loss": "train loss",
    "val_loss": "validation loss",
    "train_loss.parent": "train loss, earlier runs",
    "eval_loss": "eval loss",
    "rss_bytes": "process RSS (bytes)",
    "cuda_allocated_bytes": "CUDA allocated (bytes)",
    "lr": "learning rate",
    "grad_norm": "gradient norm",
    "time.goodput": "goodput: training share (%)",
    "time.data_wait_share": "data-wait share (%)",
    "node.cpu": "node CPU (%)",
    "node.mem_used_bytes": "node memory used (bytes)",
    "node.disk_read_bytes_per_s": "disk read (bytes/s)",
    "node.disk_write_bytes_per_s": "disk write (bytes/s)",
    "node.net_rx_bytes_per_s": "network received (bytes/s)",
    "node.net_tx_bytes_per_s": "network sent (bytes/s)",
}
_RATES: dict[str, str] = {  # {u}: the run's token unit ("tokens" or "samples")
    "recent_tokens_per_s": "{u}/s, session (last 10 s, wall clock)",
    "recent_train_tokens_per_s": "{u}/s, training-only (same last 10 s)",
    "train_tokens_per_s": "{u}/s, training-only (per report window)",
    "session_tokens_per_s": "{u}/s (session, per report)",
}
_GPU = {"util": "GPU-Util (%)", "sm_activity": "SM activity (%)", "tensor_activity": "tensor activity (%)"}
_SUFFIXES = (("_bytes_per_s", "bytes/s"), ("_tokens_per_s", "tokens/s"), ("_samples_per_s", "samples/s"),
             ("_per_s", "/s"), ("_bytes", "bytes"), ("_fraction", "%"), ("_s", "s"), ("_w", "W"), ("_c", "C"))


def series_label(name: str, token_unit: str = "tokens") -> str:
    """The human label of series ``name`` (with its unit where it has one)."""
    if name in _FIXED:
        return _FIXED[name]
    if name in _RATES:
        return _RATES[name].format(u="tokens" if token_unit == "tokens" else "samples")
    head, _, reading = name.partition(".")  # gpu<index>.<reading> (string tests: no pattern compiled at import)
    if reading in _GPU and head.startswith("gpu") and head[3:].isdecimal():
        return f"GPU {head[3:]} {_GPU[reading]}"
    if name.startswith("lr/"):
        return f"learning rate, {name[3:]}"
    suffix, unit = next(((s, u) for s, u in _SUFFIXES if name.endswith(s) and len(name) > len(s)), ("", ""))
    stem = name[: len(name) - len(suffix)]
    text = re.sub(r"[_.]+", " ", stem).strip() or stem
    if unit == "/s":
        return f"{text} per second"
    return f"{text} ({unit})" if unit else text


def label_charts(charts: Iterable[Any], token_unit: str = "tokens") -> list[Any]:
    """Chart specs with ``labels`` for every series and smoothed twin (labels a spec already has are kept)."""
    out: list[Any] = []
    for spec in charts:
        if isinstance(spec, dict):
            have = spec.get("labels") if isinstance(spec.get("labels"), dict) else {}
            twins = spec.get("smoothed") if isinstance(spec.get("smoothed"), dict) else {}
            names = [*(spec.get("series") or ()), *twins.values()]
            spec = {**spec, "labels": {n: str(have.get(n) or series_label(str(n), token_unit)) for n in names}}
        out.append(spec)
    return out
