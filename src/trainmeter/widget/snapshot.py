"""The static dashboard (docs/protocol.md section 4): tables and SVG chart images, no JavaScript, in the live charts'
look (widget/look.py), re-decimated to :data:`CHART_POINTS` (a snapshot well under 60 KB). Pure functions."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from itertools import groupby
from typing import Any
from urllib.parse import quote

from trainmeter.core.decimate import decimate
from trainmeter.sizes import (
    MISSING,
    axis_labels,
    format_axis,
    format_duration,
    format_integer,
    format_percent,
    format_seconds,
    format_value,
)
from trainmeter.widget.controls import served_rel
from trainmeter.widget.look import (
    FAINT_ALPHA,
    FG,
    GRID,
    INK,
    MAIN_CHARTS,
    MARKER_COLOUR,
    MARKER_MAX_POINTS,
    MERGED_PANELS,
    MUTED,
    PALETTE,
    STATUS_COLOURS,
    WARNING_COLOUR,
    linear_ticks,
    log_ticks,
    series_label,
)
from trainmeter.widget.view_model import phase_bar, summary_text

CHART_POINTS = 240
CHART_W, CHART_H = 360, 170
PAD_L, PAD_R, PAD_T, PAD_B = 52, 10, 8, 30
MAX_CHARTS = 6
FONT = "var(--jp-ui-font-family, system-ui, -apple-system, 'Segoe UI', sans-serif)"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


# -- header ----------------------------------------------------------------------------------
def progress_text(state: dict[str, Any]) -> str:
    """The header's progress words: ETA while live, "finished in" / "failed at step N" after."""
    status = str(state.get("status", ""))
    elapsed = format_duration(state.get("elapsed_s") or 0.0)
    p = state.get("progress") or {}
    parts = []
    if p:
        parts.append(f"{format_percent(p.get('fraction'))} · {p.get('label', '')}".rstrip(" ·"))
    if status == "completed":
        parts.append(f"finished in {elapsed}")
    elif status == "failed":
        err = state.get("error")
        parts.append(f"failed at step {format_integer(state.get('step'))}" + (f": {err}" if err else "")
                     + f" after {elapsed}")
    elif status in ("interrupted", "stopped"):  # stopped: by a control or an alert (docs/spec.md section 21)
        by = ((state.get("controls") or {}).get("stopped") or {}).get("by") if status == "stopped" else None
        parts.append(f"{status}{f' by {by}' if by else ''} at step {format_integer(state.get('step'))} after {elapsed}")
    elif p.get("eta_s") is not None:
        parts.append(f"ETA {format_duration(p['eta_s'])} ({p.get('pace', 'training-only')} pace)")
    return " · ".join(x for x in parts if x)


def _header(state: dict[str, Any]) -> str:
    status = str(state.get("status", ""))
    color = STATUS_COLOURS.get(status, MUTED)
    p = state.get("progress") or {}
    bar = ""
    if p:
        pct = max(0.0, min(1.0, float(p.get("fraction") or 0.0))) * 100
        bar = (f'<div style="height:6px;background:{GRID};border-radius:3px;overflow:hidden;margin-top:3px">'
               f'<div style="width:{pct:.1f}%;height:6px;background:{PALETTE[0]}"></div></div>')
    return (f'<table style="border-collapse:collapse;width:100%"><tr>'
            f'<td style="text-align:left;padding:2px 8px 2px 0;white-space:nowrap"><b style="font-size:14px">'
            f'{_esc(state.get("name", "run"))}</b></td>'
            f'<td data-tm="status" style="padding:2px 8px;color:{color};font-weight:600">{_esc(status)}</td>'
            f'<td style="text-align:left;padding:2px 8px;color:{MUTED}">'
            f'{_esc(format_duration(state.get("elapsed_s") or 0.0))}</td>'
            f'<td style="text-align:left;padding:2px 0 2px 8px;width:60%">{_esc(progress_text(state))}{bar}</td>'
            f"</tr></table>")


# -- tiles (as js/src/tiles.ts prints and folds them) ----------------------------------------
def format_tile(tile: dict[str, Any]) -> str:
    """A tile's value as text (the same text the live tile shows)."""
    if tile.get("text"):
        return str(tile["text"])
    if tile.get("value") is None:
        return MISSING
    if tile.get("id") == "step":
        return format_integer(tile["value"])
    return format_value(tile["value"], str(tile.get("unit", "")))


def tiles_html(all_tiles: Sequence[dict[str, Any]], per_row: int = 4) -> str:
    """The tiles as a table, ``per_row`` a row, and one line for those folded: a tile whose value is missing for a
    reason about this machine (as js/src/tiles.ts folds and words them)."""
    folded = [t for t in all_tiles if t.get("not_here") and t.get("value") is None and not t.get("text")]
    shown = [t for t in all_tiles if t not in folded]
    rows = []
    for i in range(0, len(shown), per_row):
        chunk = shown[i:i + per_row]
        labels = "".join(f'<th style="text-align:left;font-weight:400;font-size:11px;color:{MUTED};'
                         f'padding:4px 12px 0 0">{_esc(t.get("label", ""))}</th>' for t in chunk)
        values = "".join(
            '<td style="text-align:left;font-size:16px;font-weight:600;padding:0 12px 0 0;white-space:nowrap"'
            + (' data-tm="step"' if t.get("id") == "step" else "") + f">{_esc(format_tile(t))}</td>"
            for t in chunk)
        # a missing value's reason (or the input that would enable it), as the live tile says; else its sub
        notes = [t.get("missing") if t.get("value") is None and not t.get("text") else t.get("sub") for t in chunk]
        subs = "".join(f'<td style="text-align:left;font-size:11px;color:{MUTED};padding:0 12px 2px 0">'
                       f'{_esc(note or "")}</td>' for note in notes)
        rows.append(f"<tr>{labels}</tr><tr>{values}</tr><tr>{subs}</tr>")
    table = f'<table style="border-collapse:collapse;margin:4px 0">{"".join(rows)}</table>' if rows else ""
    if not folded:
        return table
    text = "Not on this machine: " + " · ".join(f"{t.get('label')}: {t.get('missing') or 'not available'}"
                                                for t in folded)
    return table + f'<div data-tm="not-here" style="font-size:11px;color:{MUTED};margin:2px 0 6px">{_esc(text)}</div>'


# -- charts ------------------------------------------------------------------------------------
def marker_xs(spec: dict[str, Any], markers: Sequence[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """``(x, marker)`` of the verdict markers that belong on ``spec``, in its native x (a time chart's mapped by Python:
    ``at``, widget/x_axis.py ``place_markers``); a marker that cannot be placed is left out."""
    mine = [m for m in markers if m.get("chart") == spec.get("id") and isinstance(m.get("step"), int | float)]
    xs = [(m.get("at") or {}).get("time") if spec.get("x") == "time" else float(m["step"]) for m in mine]
    return [(x, m) for x, m in zip(xs, mine, strict=True) if x is not None]


def chart_svg(spec: dict[str, Any], series: dict[str, tuple[str, Sequence[float], Sequence[float]]],
              markers: Sequence[dict[str, Any]] = ()) -> str | None:
    """A standalone SVG document for one chart spec, or ``None`` without data; ``markers`` (``state["markers"]``) of
    this chart drawn as a dashed vertical line where the verdict began, the marker's short label on top."""
    lines = []  # (xs, ys, colour): the raw series as read, its smoothed twin a light band over it
    for name, colour, faint in _drawn(spec, series):
        xs, ys = decimate(series[name][1], series[name][2], CHART_POINTS)
        lines.append((list(xs), list(ys), colour + FAINT_ALPHA if faint else colour, faint))
    # a constant (an lr never scheduled) on a log axis reads as nothing: a linear one, as live (js/src/chartoptions.ts)
    log_y = bool(spec.get("log_y")) and len({y for _, ys, _, _ in lines for y in ys if math.isfinite(y)}) > 1

    def shown(point: tuple[float, float]) -> bool:  # a point the y axis can place
        return math.isfinite(point[1]) and (point[1] > 0 or not log_y)

    finite = [p for xs, ys, _, _ in lines for p in zip(xs, ys, strict=True) if shown(p)]
    if not finite:
        return None
    placed = marker_xs(spec, markers)
    all_xs = [x for x, _ in finite] + [x for x, _ in placed]
    x0, x1 = min(all_xs), max(all_xs)
    y0, y1 = min(p[1] for p in finite), max(p[1] for p in finite)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 - y0 <= 1e-9 * max(abs(y0), abs(y1)):  # flat (to rounding): centre it in a readable span
        y0 = y1 = (y0 + y1) / 2
        y0, y1 = (y0 / 2, y1 * 2) if log_y else (y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1))
    scale = math.log10 if log_y else float  # where a y value sits along the axis
    pad = (scale(y1) - scale(y0)) * 0.05
    if log_y:
        y0, y1 = 10 ** (math.log10(y0) - pad), 10 ** (math.log10(y1) + pad)
    elif spec.get("unit") == "fraction":  # shares on their whole 0-100% scale, as the live chart draws them
        y0, y1 = 0.0, max(1.0, y1)
    elif spec.get("y_range"):  # from 0 (to the device's total, memory), as live; a reading past it still shows
        low, high = spec["y_range"]
        y0, y1 = float(low), max(high or y1 * 1.05, y1) or 1.0
    else:
        y0, y1 = y0 - pad, y1 + pad
    w, h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * w

    def sy(y: float) -> float:
        return PAD_T + (1 - (scale(y) - scale(y0)) / (scale(y1) - scale(y0))) * h

    unit = str(spec.get("unit", ""))
    parts = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{w}" height="{h}" fill="none" stroke="{GRID}"/>']
    y_ticks = log_ticks(y0, y1) if log_y else linear_ticks(y0, y1)
    for t, label in zip(y_ticks, axis_labels(y_ticks, unit), strict=True):
        y = sy(t)
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>'
                     f'<text x="{PAD_L - 4}" y="{y + 3.5:.1f}" text-anchor="end">{_esc(label)}</text>')
    x_time = spec.get("x") == "time"
    long_time = x_time and x1 >= 60
    for t in linear_ticks(x0, x1):
        x = sx(t)
        label = (format_duration(t) if long_time else format_seconds(t)) if x_time else format_axis(t, "count")
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{PAD_T + h}" stroke="{GRID}"/>'
                     f'<text x="{x:.1f}" y="{PAD_T + h + 12}" text-anchor="middle">{_esc(label)}</text>')
    x_caption = str(spec.get("x_label") or ("time since start" if x_time else "step"))
    parts.append(f'<text x="{PAD_L + w}" y="{CHART_H - 3}" text-anchor="end">'
                 f'{_esc(x_caption)}{" (log y)" if log_y else ""}</text>')
    for xs, ys, color, faint in lines:
        pts = [p for p in zip(xs, ys, strict=True) if shown(p)]
        for drawn, run in groupby(zip(xs, ys, strict=True), key=shown):
            seg = [f"{sx(x):.1f},{sy(y):.1f}" for x, y in run] if drawn else []  # a gap breaks the line
            if len(seg) > 1:
                parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="{4 if faint else 1.5}" '
                             f'points="{" ".join(seg)}"/>')
        if len(pts) <= MARKER_MAX_POINTS:
            parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts)
    for x, m in placed:
        px = sx(x)
        anchor = "end" if px > PAD_L + w * 0.7 else "start"
        parts.append(f'<line data-tm-marker="{_esc(m.get("kind", ""))}" x1="{px:.1f}" x2="{px:.1f}" y1="{PAD_T}" '
                     f'y2="{PAD_T + h}" stroke="{MARKER_COLOUR}" stroke-width="1.5" stroke-dasharray="4 3">'
                     f'<title>{_esc(m.get("sentence", ""))}</title></line>'
                     f'<text x="{px + (-3 if anchor == "end" else 3):.1f}" y="{PAD_T + 10}" text-anchor="{anchor}" '
                     f'fill="{MARKER_COLOUR}">{_esc(m.get("label", ""))}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" '
            f'viewBox="0 0 {CHART_W} {CHART_H}" font-family="system-ui, sans-serif" font-size="10" '
            f'fill="{INK}">' + "".join(parts) + "</svg>")


def _drawn(spec: dict[str, Any], series: dict[str, tuple[str, Sequence[float], Sequence[float]]]
           ) -> list[tuple[str, str, bool]]:
    """``(name, colour, faint)`` of each line of the chart and its legend, as live: the spec's series that have points,
    each in the next palette colour, its smoothed twin a faint band in the same colour; a resumed run's earlier runs
    (``.parent``) faint, in the training loss's colour."""
    twins = spec.get("smoothed") if isinstance(spec.get("smoothed"), dict) else {}
    out = []
    for i, name in enumerate(n for n in spec.get("series", []) if n in series and len(series[n][1])):
        parent = name.endswith(".parent")
        out.append((name, PALETTE[0 if parent else i % len(PALETTE)], parent))
        if len(series.get(twins.get(name), ("", ()))[1]):
            out.append((twins[name], PALETTE[i % len(PALETTE)], True))
    return out


def _chart_table(cells: list[str]) -> str:
    if not cells:
        return ""
    rows = "".join(f"<tr>{''.join(cells[i:i + 2])}</tr>" for i in range(0, len(cells), 2))
    return f'<table style="border-collapse:collapse">{rows}</table>'


def _chart(spec: dict[str, Any], series: dict[str, tuple[str, Sequence[float], Sequence[float]]],
           markers: Sequence[dict[str, Any]] = ()) -> str | None:
    svg = chart_svg(spec, series, markers)
    if svg is None:
        return None
    labels = spec.get("labels") if isinstance(spec.get("labels"), dict) else {}
    # the raw series and its smoothed twin (the light band) are both named, as in the live legend
    legend = " &nbsp; ".join(f'<span style="color:{colour}{FAINT_ALPHA if faint else ""}">&#9632;</span> '
                             f'{_esc(labels.get(n) or series_label(n))}' for n, colour, faint in _drawn(spec, series))
    notes = "".join(f'<div style="font-size:11px;color:{MARKER_COLOUR}">&#9660; {_esc(m.get("label", ""))} at step '
                    f'{_esc(format_integer(m.get("step")))}: {_esc(m.get("sentence", ""))}</div>'
                    for _, m in marker_xs(spec, markers))
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    title = _esc(spec.get("title", ""))
    return (f'<td style="text-align:left;vertical-align:top;padding:4px 8px 4px 0">'
            f'<div style="font-size:12px;font-weight:600">{title}</div>'
            f'<img src="{uri}" alt="{title} chart" width="{CHART_W}" height="{CHART_H}" '
            f'data-tm-chart="{_esc(spec.get("id", ""))}">'
            f'<div style="font-size:11px;color:{MUTED}">{legend}</div>{notes}</td>')


# -- sections ----------------------------------------------------------------------------------
def _phases(state: dict[str, Any], panels: Sequence[dict[str, Any]]) -> str:
    merged = next((p for p in panels if p.get("id") in MERGED_PANELS), None)
    if merged is not None:  # the time-split extension's table says it all: one section, not two
        return _panel(merged)
    phases_s, bar = state.get("phases_s") or {}, state.get("phase_bar")
    # a state saved before the view model sent the shares: computed here
    shares = (bar if isinstance(bar, dict) else phase_bar(phases_s)).get("shares") or {}
    if not shares:
        return ""
    rows = "".join(f'<tr><td style="text-align:left;padding:0 12px 0 0">{_esc(name)}</td>'
                   f'<td style="padding:0 12px 0 0;text-align:right">{_esc(format_seconds(phases_s.get(name)))}</td>'
                   f'<td style="text-align:right">{_esc(format_percent(share))}</td></tr>'
                   for name, share in shares.items())
    return _section("Where the time went", f'<table style="border-collapse:collapse">{rows}</table>')


def _panel(panel: dict[str, Any]) -> str:
    rows = panel.get("rows") or []
    if all(r.get("value") is None for r in rows):  # hardware absent here: one line, not a box
        why = panel.get("note") or next((r["note"] for r in rows if r.get("note")), "nothing to show on this machine")
        return (f'<div style="margin:4px 0;color:{MUTED}"><b style="color:{FG}">{_esc(panel.get("title", ""))}</b>'
                f" — {_esc(why)}</div>")
    body = "".join(
        f'<tr><td style="text-align:left;color:{MUTED};padding:0 12px 0 0">{_esc(r.get("label", ""))}</td>'
        f'<td style="text-align:left;padding:0 12px 0 0">{_esc(_row_value(r))}</td>'
        f'<td style="text-align:left;color:{MUTED}">{_esc(r.get("note") or "")}</td></tr>' for r in rows)
    return _section(str(panel.get("title", "")), f'<table style="border-collapse:collapse">{body}</table>')


def _row_value(row: dict[str, Any]) -> str:
    value, unit = row.get("value"), str(row.get("unit") or "")
    if value is None:
        return MISSING
    if isinstance(value, str):
        return f"{value} {unit}".strip() if unit else value
    return format_value(value, unit)


def _section(title: str, body: str) -> str:
    return (f'<details style="margin:4px 0"><summary style="cursor:pointer;font-weight:600">{_esc(title)}</summary>'
            f"{body}</details>")


def render_snapshot(state: dict[str, Any], series: Sequence[Any], *, mount_key: str | None = None) -> str:
    """The static HTML dashboard of a run from its ``state`` and ``series`` columns (``name``, ``x_kind``, ``xs``,
    ``ys``: :class:`~trainmeter.widget.frame.SeriesColumns`); ``mount_key``: the widget's ``store_key``, where its front
    end draws the live dashboard in place of this HTML while the kernel lives."""
    by_name = {s.name: (s.x_kind, s.xs, s.ys) for s in series}
    specs = state.get("charts") or []
    marks = [m for m in state.get("markers") or [] if isinstance(m, dict)]
    main = [c for c in (_chart(s, by_name, marks) for s in specs if s.get("id") in MAIN_CHARTS) if c]
    more = [c for c in (_chart(s, by_name, marks) for s in specs if s.get("id") not in MAIN_CHARTS) if c][:MAX_CHARTS]
    more_charts = _section(f"More charts ({len(more)})", _chart_table(more)) if more else ""
    panel_specs = state.get("panels") or []
    panels = "".join(_panel(p) for p in panel_specs if p.get("id") not in MERGED_PANELS)
    warnings = "".join(f'<div style="color:{WARNING_COLOUR};font-size:12px">&#9888; {_esc(w)}</div>'
                       for w in state.get("warnings") or [])
    run_dir = state.get("run_dir")
    rel = served_rel(state.get("run_rel"))
    if rel:
        href = _esc(quote(rel, safe="/.-_~"))  # percent-encoded
        where = (f'; full record in <a href="{href}">{_esc(rel)}</a> '
                 f'(<a href="{href}/passport.md">passport.md</a>)')
    else:
        where = f"; full record in {_esc(run_dir)}" if run_dir else ""
    foot = f'<div style="font-size:11px;color:{MUTED}">static view of the run{where}</div>'
    mount = f' data-tm-mount="{_esc(mount_key)}"' if mount_key else ""
    return (f'<div class="trainmeter-snapshot"{mount} style="font-family:{FONT};color:{FG};font-size:13px;'
            f'line-height:1.35;max-width:980px">{_header(state)}{tiles_html(state.get("tiles") or [])}'
            + _chart_table(main) + more_charts + f'{_phases(state, panel_specs)}{panels}{warnings}{foot}</div>')


def snapshot_bundle(state: dict[str, Any], series: Sequence[Any], *, mount_key: str | None = None) -> dict[str, Any]:
    """The output bundle of a finished dashboard: ``text/html`` plus a ``text/plain`` summary line, no widget view
    (docs/protocol.md section 4)."""
    return {"text/html": render_snapshot(state, series, mount_key=mount_key), "text/plain": summary_text(state)}
