"""The static end-of-run snapshot: tiles and inline-SVG line charts, no JavaScript.

Added as ``text/html`` to the widget's output at the cell's end, so a saved
notebook opened without a kernel, an HTML export or a site that renders
notebooks still shows the result. Styles are inline attributes (no ``<style>``
block, which some renderers strip) and follow the host's CSS variables with
fallbacks. Charts are re-decimated to a few hundred points, so the snapshot
stays small (well under 30 KB for a typical run). Pure functions of the state
dict and the series columns.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from trainmeter.sizes import format_count
from trainmeter.widget.decimate import decimate

CHART_POINTS = 240
CHART_W, CHART_H = 300, 120
PAD_L, PAD_R, PAD_T, PAD_B = 46, 6, 6, 16
MAX_CHARTS = 6
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
FG = "var(--jp-ui-font-color1, #222)"
MUTED = "var(--jp-ui-font-color2, #666)"
BORDER = "var(--jp-border-color2, #ddd)"
FONT = "var(--jp-ui-font-family, system-ui, -apple-system, 'Segoe UI', sans-serif)"


def format_value(value: Any, unit: str) -> str:
    """A tile value as text in its unit (``-`` when missing)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    v = float(value)
    if not math.isfinite(v):
        return "-"
    if unit == "bytes":
        return f"{v / 2**30:.2f} GiB" if abs(v) >= 2**27 else f"{v / 2**20:.1f} MiB"
    if unit == "fraction":
        return f"{v * 100:.1f}%"
    if unit == "s":
        return _duration(v)
    if unit in ("tokens/s", "flop/s"):
        return f"{format_count(v)}/s"
    if unit in ("count", "tokens", "flop"):
        return f"{v:,.0f}" if abs(v) < 1e5 and v == int(v) else format_count(v)
    return f"{v:.4g}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _tile(tile: dict[str, Any]) -> str:
    value = tile.get("text") or format_value(tile.get("value"), str(tile.get("unit", "")))
    data_tm = ' data-tm="step"' if tile.get("id") == "step" else ""
    sub = tile.get("sub") or (tile.get("missing") and f"needs {tile['missing']}") or ""
    return (f'<div style="border:1px solid {BORDER};border-radius:4px;padding:4px 8px;min-width:110px">'
            f'<div style="font-size:11px;color:{MUTED}">{_esc(tile.get("label", ""))}</div>'
            f'<div style="font-size:16px;font-weight:600"{data_tm}>{_esc(value)}</div>'
            + (f'<div style="font-size:11px;color:{MUTED}">{_esc(sub)}</div>' if sub else "") + "</div>")


def _fmt_axis(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v / 1e9:.2g}G"
    if unit in ("tokens/s", "count", "tokens", "flop", "flop/s"):
        return format_count(v)
    return f"{v:.3g}"


def _chart(spec: dict[str, Any], series: dict[str, tuple[str, Sequence[float], Sequence[float]]]) -> str | None:
    lines = []
    for name in spec.get("series", []):
        entry = series.get(name)
        if entry is None or not len(entry[1]):
            continue
        xs, ys = decimate(entry[1], entry[2], CHART_POINTS)
        lines.append((name, xs, ys))
    finite = [(x, y) for _, xs, ys in lines for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    if not finite:
        return None
    x0, x1 = min(p[0] for p in finite), max(p[0] for p in finite)
    y0, y1 = min(p[1] for p in finite), max(p[1] for p in finite)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1)
    w, h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * w

    def sy(y: float) -> float:
        return PAD_T + (1 - (y - y0) / (y1 - y0)) * h

    unit = str(spec.get("unit", ""))
    parts = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{w}" height="{h}" fill="none" stroke="#8884"/>',
             f'<text x="{PAD_L - 3}" y="{PAD_T + 9}" text-anchor="end">{_esc(_fmt_axis(y1, unit))}</text>',
             f'<text x="{PAD_L - 3}" y="{PAD_T + h}" text-anchor="end">{_esc(_fmt_axis(y0, unit))}</text>',
             f'<text x="{PAD_L}" y="{CHART_H - 3}">{_esc(_fmt_axis(x0, ""))}</text>',
             f'<text x="{PAD_L + w}" y="{CHART_H - 3}" text-anchor="end">{_esc(_fmt_axis(x1, ""))} '
             f'{"step" if spec.get("x") == "step" else "s"}</text>']
    legend = []
    for i, (name, xs, ys) in enumerate(lines):
        color = COLORS[i % len(COLORS)]
        segments: list[list[str]] = [[]]
        for x, y in zip(xs, ys, strict=True):
            if math.isfinite(y):
                segments[-1].append(f"{sx(x):.1f},{sy(y):.1f}")
            elif segments[-1]:
                segments.append([])
        for seg in segments:
            if seg:
                parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{" ".join(seg)}"/>')
        legend.append(f'<span style="color:{color}">&#9632;</span> {_esc(name)}')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" '
           f'viewBox="0 0 {CHART_W} {CHART_H}" style="font-size:9px;fill:{MUTED}">' + "".join(parts) + "</svg>")
    return (f'<div style="border:1px solid {BORDER};border-radius:4px;padding:4px">'
            f'<div style="font-size:12px;font-weight:600">{_esc(spec.get("title", ""))}</div>{svg}'
            f'<div style="font-size:11px;color:{MUTED}">{" &nbsp; ".join(legend)}</div></div>')


def _phase_bar(phases_s: dict[str, float]) -> str:
    total = sum(v for v in phases_s.values() if v and v > 0)
    if total <= 0:
        return ""
    cells, labels = [], []
    for i, (name, v) in enumerate((k, v) for k, v in phases_s.items() if v and v > 0):
        color = COLORS[i % len(COLORS)]
        cells.append(f'<div style="width:{100 * v / total:.2f}%;background:{color}" title="{_esc(name)}"></div>')
        labels.append(f'<span style="color:{color}">&#9632;</span> {_esc(name)} {_esc(_duration(v))}')
    return ('<div style="display:flex;height:8px;border-radius:3px;overflow:hidden;margin:6px 0 2px">'
            + "".join(cells) + f'</div><div style="font-size:11px;color:{MUTED}">' + " &nbsp; ".join(labels)
            + "</div>")


def render_snapshot(state: dict[str, Any], series: Sequence[Any]) -> str:
    """Return the static HTML snapshot of a run.

    Args:
        state: The ``state`` dict (docs/protocol.md).
        series: Series columns (objects with ``name``, ``x_kind``, ``xs``, ``ys``, such as
            :class:`~trainmeter.widget.frame.SeriesColumns`).
    """
    by_name = {s.name: (s.x_kind, s.xs, s.ys) for s in series}
    progress = state.get("progress")
    head = (f'<div style="display:flex;gap:12px;align-items:baseline;flex-wrap:wrap">'
            f'<b style="font-size:14px">{_esc(state.get("name", "run"))}</b>'
            f'<span data-tm="status" style="color:{MUTED}">{_esc(state.get("status", ""))}</span>'
            f'<span style="color:{MUTED}">{_esc(_duration(float(state.get("elapsed_s") or 0.0)))}</span>'
            + (f'<span style="color:{MUTED}">{_esc(progress.get("label", ""))} '
               f'({progress.get("fraction", 0) * 100:.0f}%)</span>' if progress else "") + "</div>")
    tiles = "".join(_tile(t) for t in state.get("tiles") or [])
    charts = [c for c in (_chart(spec, by_name) for spec in state.get("charts") or []) if c][:MAX_CHARTS]
    panels = "".join(_panel(p) for p in state.get("panels") or [])
    warnings = "".join(f'<div style="color:#b35c00;font-size:12px">&#9888; {_esc(w)}</div>'
                       for w in state.get("warnings") or [])
    run_dir = state.get("run_dir")
    foot = (f'<div style="font-size:11px;color:{MUTED}">static snapshot at the end of the run'
            + (f"; full record in {_esc(run_dir)}" if run_dir else "") + "</div>")
    return (f'<div class="trainmeter trainmeter-snapshot" style="font-family:{FONT};color:{FG};font-size:13px;'
            f'line-height:1.3;max-width:980px">{head}'
            f'<div style="display:flex;flex-wrap:wrap;gap:6px;margin:6px 0">{tiles}</div>'
            f'{_phase_bar(state.get("phases_s") or {})}'
            f'<div style="display:flex;flex-wrap:wrap;gap:6px;margin:6px 0">{"".join(charts)}{panels}</div>'
            f"{warnings}{foot}</div>")


def _panel(panel: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr><td style="color:{MUTED};padding-right:8px">{_esc(r.get("label", ""))}</td>'
        f'<td>{_esc(format_value(r.get("value"), str(r.get("unit", ""))))}</td></tr>'
        for r in panel.get("rows") or [])
    return (f'<div style="border:1px solid {BORDER};border-radius:4px;padding:4px">'
            f'<div style="font-size:12px;font-weight:600">{_esc(panel.get("title", ""))}</div>'
            f'<table style="font-size:12px">{rows}</table></div>')
