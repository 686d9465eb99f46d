"""``tm.compare``: saved runs side by side, one bqplot figure per y, one line per run, a table beside.

Built from each run's passport and bounded curves (``curves.json``, or ``events.jsonl`` for
runs without one); every figure holds at most :data:`FIGURE_BUDGET_POINTS` points over all
its lines (float32 columns), so twenty long runs stay small in the browser. The figures are
plain bqplot marks drawn by the front end: no kernel-side callback is needed to see them.

bqplot, ipywidgets and numpy are imported when :func:`compare` is called, never by
``import trainmeter``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trainmeter.comparison.lines import (
    EMPTY_CURVES,
    X_KINDS,
    Y_KINDS,
    Line,
    convention_of,
    load_curves,
    make_line,
    x_label,
    y_label,
)
from trainmeter.comparison.table import table_html, table_rows

DEFAULT_LAST_RUNS = 5
"""Runs :func:`compare` picks under the run root when given none (the most recent)."""
FIGURE_BUDGET_POINTS = 8000
"""Points per figure over all its lines."""
MAX_LINE_POINTS = 2000
MIN_LINE_POINTS = 64
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def _resolve(runs: Any, root: str | Path | None, last: int) -> list[Any]:
    from trainmeter.record.runs import Run, load
    from trainmeter.record.runs import runs as saved_runs

    if runs is None:
        return saved_runs(root)[-last:] if last > 0 else []
    if isinstance(runs, (Run, str, Path)):
        runs = [runs]
    return [r if isinstance(r, Run) else load(r) for r in runs]


def _validate(x: str, y: Sequence[str] | str) -> tuple[str, ...]:
    if x not in X_KINDS:
        raise ValueError(f"invalid x {x!r} for compare: valid are {', '.join(X_KINDS)}")
    ys = (y,) if isinstance(y, str) else tuple(y)
    bad = [v for v in ys if v not in Y_KINDS]
    if bad or not ys:
        raise ValueError(f"invalid y {bad or ys!r} for compare: valid are {', '.join(Y_KINDS)}")
    return ys


def _figure(title: str, lines: list[Line], colors: dict[str, str], xlab: str, ylab: str) -> Any:
    import bqplot as bq
    import numpy as np

    xs, ys = bq.LinearScale(), bq.LinearScale()
    marks = [bq.Lines(x=np.asarray(ln.x, dtype=np.float32), y=np.asarray(ln.y, dtype=np.float32),
                      scales={"x": xs, "y": ys}, labels=[ln.run], display_legend=True, colors=[colors[ln.run]])
             for ln in lines if ln.missing is None]
    missing = [f"{ln.run}: {ln.missing}" for ln in lines if ln.missing is not None]
    if missing:
        title = f"{title} (no line for {'; '.join(missing)})"
    axes = [bq.Axis(scale=xs, label=xlab), bq.Axis(scale=ys, side="left", label=ylab, label_offset="62px")]
    fig = bq.Figure(marks=marks, axes=axes, title=title, legend_location="top-right",
                    layout={"width": "560px", "min_width": "560px", "height": "320px"},
                    fig_margin={"top": 40, "bottom": 45, "left": 80, "right": 10})
    return fig


def compare(runs: Any = None, x: str = "tokens",
            y: Sequence[str] | str = ("train_loss", "val_loss", "tokens_per_s", "mfu"), *,
            root: str | Path | None = None, last: int = DEFAULT_LAST_RUNS, convention: str | None = None) -> Any:
    """Compare saved runs: an ipywidgets box of bqplot figures (one per ``y``) and a table.

    Args:
        runs: Runs (:class:`~trainmeter.record.runs.Run`, a run folder or passport path, or a
            list of them); ``None`` picks the last ``last`` runs under ``root``. One run is drawn alone.
        x: ``"tokens"``, ``"flops"`` (needs a convention), ``"time"`` or ``"step"``.
        y: Any of ``"train_loss"``, ``"val_loss"``, ``"tokens_per_s"``, ``"mfu"``.
        root: Run root for ``runs=None`` (default ``.trainmeter/runs``).
        last: How many recent runs ``runs=None`` picks.
        convention: FLOPs convention for ``x="flops"`` and ``"mfu"`` (default: each run's own).

    Returns:
        An ``ipywidgets.HBox``: a ``VBox`` of ``bqplot.Figure`` and an ``HTML`` table. Its
        ``figures`` attribute lists the figures and ``rows`` the table's values.

    Raises:
        ValueError: A bad ``x`` or ``y`` (naming what is valid).
        FileNotFoundError: A path that holds no run.
    """
    import ipywidgets as w

    ys = _validate(x, y)
    chosen = _resolve(runs, root, last)
    if not chosen:
        where = root or ".trainmeter/runs"
        box = w.HBox([w.HTML(f"<p>no saved runs under {where}</p>")])
        box.figures, box.rows = [], []
        return box
    names = _unique([r.name for r in chosen])
    passports, docs = [], []
    for n, r in zip(names, chosen, strict=True):
        passport, doc = _readable(n, r)
        passports.append(passport)
        docs.append(doc)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    per_line = max(MIN_LINE_POINTS, min(MAX_LINE_POINTS, FIGURE_BUDGET_POINTS // len(chosen)))
    units = {p.get("token_unit", "tokens") for p in passports}
    unit = units.pop() if len(units) == 1 else "tokens or samples"
    convs = {convention_of(p, convention) for p in passports}
    conv_text = convs.pop() if len(convs) == 1 else "each run's own"
    figures = []
    for yk in ys:
        lines = [_line(n, p, d, x, yk, convention, per_line) for n, p, d in zip(names, passports, docs, strict=True)]
        figures.append(_figure(f"{yk} vs {x}", lines, colors, x_label(x, unit, conv_text), y_label(yk, unit, conv_text)))
    rows = table_rows(names, passports)
    table = w.HTML(table_html(rows), layout=w.Layout(flex="1 1 320px", overflow="auto"))
    plots = w.VBox(figures, layout=w.Layout(flex="0 0 auto", width="580px"))
    box = w.HBox([plots, table], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))
    box.add_class("tm-compare")
    box.figures, box.rows = figures, rows
    return box


def _readable(name: str, run: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's passport and curves, or (a damaged one) a stand-in saying why: one run never breaks the rest."""
    from trainmeter.record.runs import damaged_passport

    try:
        doc = load_curves(run)
        table_rows([name], [run.passport])  # the table reads what it needs of the passport
        return run.passport, doc
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


def _unique(names: Iterable[str]) -> list[str]:
    """Run names made unique for the legend (``name``, ``name (2)``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out
