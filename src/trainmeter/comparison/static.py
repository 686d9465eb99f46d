"""``tm.compare`` as static HTML (what a reopened notebook, nbconvert and GitHub show): one SVG chart per y that some
run has (``<img>`` data URIs), the missing lines named, the table. Pure functions.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

from trainmeter.comparison.lines import Line
from trainmeter.widget.look import MUTED, PALETTE
from trainmeter.widget.snapshot import CHART_H, CHART_W, chart_svg


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def figure_html(title: str, lines: Sequence[Line], x_kind: str, x_caption: str, y_label: str) -> str | None:
    """One figure (title, chart, legend, the runs without a line), or ``None`` when no run has a line."""
    drawn = [ln for ln in lines if ln.missing is None and ln.x]
    missing = [f"{ln.run}: {ln.missing}" for ln in lines if ln.missing is not None]
    if not drawn:
        return None
    spec = {"id": title, "title": title, "x": "time" if x_kind == "time" else "step", "unit": "",
            "series": [ln.run for ln in drawn], "x_label": x_caption}
    series = {ln.run: ("step", ln.x, ln.y) for ln in drawn}
    svg = chart_svg(spec, series)
    if svg is None:
        return None
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    legend = " &nbsp; ".join(f'<span style="color:{PALETTE[i % len(PALETTE)]}">&#9632;</span> {_esc(ln.run)}'
                             for i, ln in enumerate(drawn))
    note = (f'<div style="font-size:11px;color:{MUTED}">no line for {_esc("; ".join(missing))}</div>'
            if missing else "")
    return (f'<div class="tm-compare-figure" data-tm-figure="{_esc(title)}" style="display:inline-block;'
            f'vertical-align:top;margin:0 12px 8px 0;max-width:100%">'
            f'<div style="font-size:12px;font-weight:600">{_esc(title)}'
            f' <span style="font-weight:400;color:{MUTED}">({_esc(y_label)})</span></div>'
            f'<img src="{uri}" alt="{_esc(title)} chart" width="{CHART_W}" height="{CHART_H}" style="max-width:100%">'
            f'<div style="font-size:11px;color:{MUTED}">{legend}</div>{note}</div>')


def comparison_html(figures: Sequence[str], absent: Sequence[str], table: str) -> str:
    """The whole comparison: the figures, one line per y no run has, the table (scrolling sideways if wide)."""
    gone = "".join(f'<div style="font-size:12px;color:{MUTED}">{_esc(a)}</div>' for a in absent)
    return (f'<div class="trainmeter-compare" style="font-family:var(--jp-ui-font-family, system-ui, sans-serif);'
            f'max-width:100%">{"".join(figures)}{gone}'
            f'<div style="max-width:100%;overflow-x:auto">{table}</div></div>')
