"""``tm.compare``: saved runs side by side, one chart per y, one line per run, a table of what differs, one row per
run from its passport (docs/spec.md section 15). bqplot, ipywidgets and numpy are imported only by :meth:`Comparison.widget`.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainmeter.comparison.extension import (
    EMPTY_CURVES,
    X_KINDS,
    Y_KINDS,
    Line,
    convention_of,
    load_curves,
    make_line,
    training_curves,
    x_label,
    y_label,
)
from trainmeter.record.runs import Run, damaged_passport, load
from trainmeter.record.runs import runs as saved_runs
from trainmeter.sizes import MISSING, format_count, format_number, format_percent, format_rate
from trainmeter.widget.look import FIGURE_PALETTE, MUTED, PALETTE
from trainmeter.widget.snapshot import CHART_H, CHART_W, chart_svg

DEFAULT_LAST_RUNS = 5
"""Runs :func:`compare` picks under the run root when given none (the most recent)."""
FIGURE_BUDGET_POINTS = 8000
"""Points per figure over all its lines."""
MAX_LINE_POINTS = 2000
MIN_LINE_POINTS = 64


def _figure(title: str, lines: list[Line], colors: dict[str, str], xlab: str, ylab: str) -> Any:
    import bqplot as bq
    import numpy as np

    xs, ys = bq.LinearScale(), bq.LinearScale()
    marks = [bq.Lines(x=np.asarray(ln.x, dtype=np.float32), y=np.asarray(ln.y, dtype=np.float32),
                      scales={"x": xs, "y": ys}, labels=[ln.run], display_legend=True, colors=[colors[ln.run]])
             for ln in lines if ln.missing is None]
    y_kind, x_kind = title.split(" vs ")
    x_fmt = "~g" if x_kind == "time" else "~s"  # SI ticks ("100k"), never "1e+5"
    y_fmt = {"tokens_per_s": "~s", "mfu": ".0%"}.get(y_kind, "~g")
    axes = [bq.Axis(scale=xs, label=xlab, tick_format=x_fmt),
            bq.Axis(scale=ys, side="left", label=ylab, label_offset="62px", tick_format=y_fmt)]
    return bq.Figure(marks=marks, axes=axes, title=title, legend_location="top-right",
                     layout={"width": "560px", "max_width": "100%", "height": "320px"},
                     fig_margin={"top": 40, "bottom": 45, "left": 80, "right": 10})


def figure_html(title: str, lines: Sequence[Line], x_kind: str, x_caption: str, y_label: str) -> str | None:
    """One figure (title, chart, legend, the runs without a line), or ``None`` when no run has a line."""
    drawn = [ln for ln in lines if ln.missing is None and ln.x]
    missing = [f"{ln.run}: {ln.missing}" for ln in lines if ln.missing is not None]
    spec = {"id": title, "title": title, "x": "time" if x_kind == "time" else "step", "unit": "",
            "series": [ln.run for ln in drawn], "x_label": x_caption}
    if not drawn or (svg := chart_svg(spec, {ln.run: ("step", ln.x, ln.y) for ln in drawn})) is None:
        return None
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    name = html.escape(title)
    legend = " &nbsp; ".join(f'<span style="color:{PALETTE[i % len(PALETTE)]}">&#9632;</span> {html.escape(ln.run)}'
                             for i, ln in enumerate(drawn))
    note = (f'<div style="font-size:11px;color:{MUTED}">no line for {html.escape("; ".join(missing))}</div>'
            if missing else "")
    return (f'<div class="tm-compare-figure" data-tm-figure="{name}" style="display:inline-block;'
            f'vertical-align:top;margin:0 12px 8px 0;max-width:100%">'
            f'<div style="font-size:12px;font-weight:600">{name}'
            f' <span style="font-weight:400;color:{MUTED}">({html.escape(y_label)})</span></div>'
            f'<img src="{uri}" alt="{name} chart" width="{CHART_W}" height="{CHART_H}" style="max-width:100%">'
            f'<div style="font-size:11px;color:{MUTED}">{legend}</div>{note}</div>')


DIFF_IGNORED = ("options.name", "options.run_root")
"""Keys that differ by design and are not worth a mention."""


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {key: v for k, sub in value.items() for key, v in _flat(f"{prefix}.{k}", sub).items()}


def differences(passports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: ``{key: value}`` of ``environment.*`` and ``options.*`` keys that differ from the first run."""
    flats = [{**_flat("environment", p.get("environment") or {}), **_flat("options", p.get("options") or {})}
             for p in passports]
    keys = sorted({k for f in flats for k in f} - set(DIFF_IGNORED))
    varying = [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]
    base = flats[0] if flats else {}
    return [{k: f.get(k) for k in varying if i == 0 or f.get(k) != base.get(k)} for i, f in enumerate(flats)]


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return MISSING
    if kind:
        return {"pct": format_percent, "count": format_count, "rate": lambda v: format_rate(v, "")}[kind](value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_number(value)
    return str(value)


def table_rows(names: list[str], passports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per run with the table's values (numbers, not text)."""
    diffs = differences(passports)
    rows = []
    for name, p, diff in zip(names, passports, diffs, strict=True):
        loss = (p.get("series") or {}).get("train_loss") or {}
        conv = convention_of(p, None)
        rows.append({
            "run": name, "status": p.get("status", "unfinished"), "steps": p.get("steps"), "tokens": p.get("tokens"),
            "final_loss": loss.get("last"), "best_loss": loss.get("min"),
            "tokens_per_s": (p.get("throughput") or {}).get("train_tokens_per_s"),
            "mfu": ((p.get("compute") or {}).get("mfu") or {}).get(conv) if conv else None, "convention": conv,
            "j_per_token": (p.get("energy") or {}).get("j_per_token"), "goodput": p.get("goodput"), "differs": diff,
        })
    return rows


def table_html(rows: list[dict[str, Any]]) -> str:
    """The rows as an HTML table (class ``tm-compare-table``)."""
    head = ("run", "status", "steps", "tokens", "final loss", "best loss", "tokens/s", "MFU", "J/token", "goodput",
            "differs from the first run")
    # the table scrolls sideways in its own box and its last column wraps: never cut by a narrow output area
    out = ['<table class="tm-compare-table" style="border-collapse:collapse;font-size:12px;display:block;'
           'max-width:100%;overflow-x:auto">',
           "<tr>" + "".join(f'<th style="text-align:left;padding:2px 6px;white-space:nowrap">{h}</th>' for h in head) + "</tr>"]
    for r in rows:
        mfu = _fmt(r["mfu"], "pct") + (f" ({r['convention']})" if r["mfu"] is not None else "")
        differs = "; ".join(f"{k.split('.', 1)[1]}={_fmt(v)}" for k, v in r["differs"].items()) or MISSING
        cells = (r["run"], r["status"], _fmt(r["steps"], "count"), _fmt(r["tokens"], "count"), _fmt(r["final_loss"]),
                 _fmt(r["best_loss"]), _fmt(r["tokens_per_s"], "rate"), mfu, _fmt(r["j_per_token"]),
                 _fmt(r["goodput"], "pct"))
        out.append("<tr>" + "".join(f'<td style="padding:2px 6px;white-space:nowrap">{html.escape(str(c))}</td>' for c in cells)
                   + f'<td style="padding:2px 6px;min-width:16em;overflow-wrap:anywhere">{html.escape(differs)}</td></tr>')
    return "\n".join([*out, "</table>"])


class Comparison:
    """What :func:`compare` returns: static HTML everywhere (:func:`figure_html`), the interactive figures on
    request (:meth:`widget`). ``lines``: ``{y: [Line, ...]}``, one per run; ``rows``: the table's values."""

    def __init__(self, lines: dict[str, list[Line]], rows: list[dict[str, Any]], html: str,
                 labels: dict[str, tuple[str, str]], colors: dict[str, str], x: str) -> None:
        self.lines, self.rows, self.html = lines, rows, html
        self._labels, self._colors, self._x = labels, colors, x

    @property
    def drawn(self) -> list[str]:
        """The ``y`` kinds some run has a line for (the figures shown)."""
        return [y for y, ls in self.lines.items() if any(ln.missing is None and ln.x for ln in ls)]

    def _repr_html_(self) -> str:  # IPython's display: text/html, with __repr__ as text/plain
        return self.html

    def __repr__(self) -> str:
        return (f"<trainmeter comparison of {len(self.rows)} run(s) by {self._x}: "
                f"{', '.join(self.drawn) or 'no line'}>")

    def widget(self) -> Any:
        """The interactive figures: an ``ipywidgets`` box of bqplot figures (one per drawn y, in ``.figures``) and
        the table (``.rows``)."""
        import ipywidgets as w

        figures = [_figure(f"{yk} vs {self._x}", self.lines[yk], self._colors, *self._labels[yk]) for yk in self.drawn]
        table = w.HTML(table_html(self.rows), layout=w.Layout(overflow="auto", max_width="100%"))
        plots = w.VBox(figures, layout=w.Layout(flex="0 0 auto"))
        box = w.VBox([plots, table], layout=w.Layout(align_items="flex-start", max_width="100%"))
        box.add_class("tm-compare")
        box.figures, box.rows = figures, self.rows
        return box


def compare(runs: Any = None, x: str = "tokens",
            y: Sequence[str] | str = ("train_loss", "val_loss", "tokens_per_s", "mfu"), *,
            root: str | Path | None = None, last: int = DEFAULT_LAST_RUNS, convention: str | None = None,
            training: bool = True) -> Comparison:
    """Compare saved runs: one chart per ``y`` some run has (one line per run) and a table of what differs.

    Args:
        runs: Runs (:class:`~trainmeter.record.runs.Run`, a run folder or passport path, or a list of them);
            ``None`` picks the last ``last`` runs under ``root`` (default ``.trainmeter/runs``).
        x: ``"tokens"``, ``"flops"`` (needs a convention), ``"time"`` or ``"step"``.
        y: Any of ``"train_loss"``, ``"val_loss"``, ``"tokens_per_s"``, ``"mfu"``.
        convention: FLOPs convention for ``x="flops"`` and ``"mfu"`` (default: each run's own).
        training: A resumed run (``--resume``) is drawn as its whole training, one curve across its lineage, and
            its row counts the training's steps and tokens; ``False``: its own points only.

    Returns:
        A :class:`Comparison`: displayed as static HTML/SVG; ``.widget()`` gives the interactive bqplot figures.

    Raises:
        ValueError: A bad ``x`` or ``y`` (naming what is valid).
        FileNotFoundError: A path that holds no run.
    """
    ys = (y,) if isinstance(y, str) else tuple(y)
    if x not in X_KINDS:
        raise ValueError(f"invalid x {x!r} for compare: valid are {', '.join(X_KINDS)}")
    if (bad := [v for v in ys if v not in Y_KINDS]) or not ys:
        raise ValueError(f"invalid y {bad or ys!r} for compare: valid are {', '.join(Y_KINDS)}")
    if runs is None:
        chosen = saved_runs(root)[-last:] if last > 0 else []
    else:
        runs = [runs] if isinstance(runs, (Run, str, Path)) else runs
        chosen = [r if isinstance(r, Run) else load(r) for r in runs]
    if not chosen:
        where = html.escape(str(root or ".trainmeter/runs"))
        return Comparison({}, [], f"<p>no saved runs under {where}</p>", {}, {}, x)
    names = _unique([r.name for r in chosen])
    readable = [_readable(n, r, training) for n, r in zip(names, chosen, strict=True)]
    passports, docs = [p for p, _ in readable], [d for _, d in readable]
    colors = {n: FIGURE_PALETTE[i % len(FIGURE_PALETTE)] for i, n in enumerate(names)}
    per_line = max(MIN_LINE_POINTS, min(MAX_LINE_POINTS, FIGURE_BUDGET_POINTS // len(chosen)))
    units = {p.get("token_unit", "tokens") for p in passports}
    unit = units.pop() if len(units) == 1 else "tokens or samples"
    convs = {convention_of(p, convention) for p in passports}
    conv_text = convs.pop() if len(convs) == 1 else "each run's own"
    lines: dict[str, list[Line]] = {}
    labels: dict[str, tuple[str, str]] = {}
    figures, absent = [], []
    for yk in ys:
        lines[yk] = [_line(n, p, d, x, yk, convention, per_line)
                     for n, p, d in zip(names, passports, docs, strict=True)]
        labels[yk] = (x_label(x, unit, conv_text), y_label(yk, unit, conv_text))
        if (fig := figure_html(f"{yk} vs {x}", lines[yk], x, *labels[yk])) is None:
            why = sorted({ln.missing for ln in lines[yk] if ln.missing})
            absent.append(f'<div style="font-size:12px;color:{MUTED}">'
                          f"{html.escape(yk)}: no run has it ({html.escape('; '.join(why) or 'no points')})</div>")
        else:
            figures.append(fig)
    rows = table_rows(names, passports)  # the figures, one line per y no run has, the table (scrolling sideways)
    page = (f'<div class="trainmeter-compare" style="font-family:var(--jp-ui-font-family, system-ui, sans-serif);'
            f'max-width:100%">{"".join(figures + absent)}<div style="max-width:100%;overflow-x:auto">'
            f"{table_html(rows)}</div></div>")
    return Comparison(lines, rows, page, labels, colors, x)


def _readable(name: str, run: Any, training: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's passport and curves (``training``: its training's, docs/spec.md section 22); damaged: a stand-in."""
    try:
        doc, passport = load_curves(run), run.passport
        counts = (passport.get("lineage") or {}).get("training")
        if training and isinstance(counts, dict):
            doc = training_curves(run.dir, passport, doc)
            passport = {**passport, "steps": counts.get("steps"), "tokens": counts.get("tokens")}
        table_rows([name], [passport])  # the table reads what it needs of the passport
        return passport, doc
    except Exception as exc:
        reason = f"{run.damaged or 'its passport or curves'} ({type(exc).__name__}: {exc})"
        return damaged_passport(run.dir, reason), dict(EMPTY_CURVES)


def _line(name: str, passport: dict[str, Any], doc: dict[str, Any], x: str, y: str, convention: str | None,
          budget_points: int) -> Line:
    if passport.get("damaged") and passport.get("summarised_from") == "nothing":
        return Line(run=name, x=[], y=[], missing=f"damaged: {passport['damaged']}")
    try:
        return make_line(name, passport, doc, x, y, convention, budget_points)
    except Exception as exc:  # curves of the wrong types
        return Line(run=name, x=[], y=[], missing=f"damaged curves ({type(exc).__name__})")


def _unique(names: list[str]) -> list[str]:
    """Run names made unique for the legend (``name``, ``name (2)``, ...)."""
    return [f"{n} ({names[:i].count(n) + 1})" if n in names[:i] else n for i, n in enumerate(names)]
