"""A run's curves, bounded, and their recorder (name ``curves``): decimated losses and one row per report, saved as
``curves.json`` (docs/spec.md section 15); read back, the lines ``tm.compare`` draws: one run's curve for one y against
one x, decimated to a point budget, a training as one curve (a resumed run's joined with its earlier runs', sections
15 and 22).

The losses are the run's decimated views (core/series_views.py: the widget draws the same buckets), or a view of
their own filled from a run log. Report rows are thinned to every other (the latest kept) over :data:`MAX_REPORTS`.
In a run the report worker alone adds the rows of :attr:`CurvesRecorder.curves` and catches its losses up to each
report (docs/spec.md section 20). The lines are pure functions over a run's passport and curves document.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmeter.core.decimate import decimate
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.series_views import SeriesViews
from trainmeter.lineage.view import earlier_runs, step_origin
from trainmeter.record.events import LOG_FILE, iter_events
from trainmeter.record.runlog import compact_json, write_file_atomic
from trainmeter.record.runs import REPLAY_MAX_BYTES, load
from trainmeter.record.safe_read import open_regular, read_json

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

CURVES_FILE = "curves.json"
CURVES_SCHEMA_VERSION = 1
SERIES_BUDGET_POINTS = 2000
MAX_REPORTS = 4096
LOSS_SERIES = ("train_loss", "val_loss")
REPORT_COLUMNS = ("step", "tokens", "elapsed_s", "tokens_per_s")


class Curves:
    """Bounded curves of one run (see the module docstring): the losses of a live run's ``views``, else its own."""

    def __init__(self, budget_points: int = SERIES_BUDGET_POINTS, max_reports: int = MAX_REPORTS,
                 views: SeriesViews | None = None) -> None:
        self.views = views if views is not None else SeriesViews()
        self.views.subscribe("curves", LOSS_SERIES, budget_points=budget_points)
        self._max_reports = max_reports
        self.reports: dict[str, list[float | None]] = {c: [] for c in REPORT_COLUMNS}
        self.mfu: dict[str, list[float | None]] = {}

    def add_series(self, name: str, steps: list[int] | list[float], values: list[float]) -> None:
        """Points of a loss series read from a run log (steps non-decreasing)."""
        if steps:
            self.views.extend(name, "step", steps, values)

    def add_report(self, *, step: int, tokens: int, elapsed_s: float, tokens_per_s: float | None,
                   mfu: dict[str, float | None] | None = None) -> None:
        """One report's row."""
        n = len(self.reports["step"])
        for key, value in zip(REPORT_COLUMNS, (step, tokens, elapsed_s, tokens_per_s), strict=True):
            self.reports[key].append(value)
        for conv in mfu or {}:
            self.mfu.setdefault(conv, [None] * n)
        for conv, column in self.mfu.items():
            column.append((mfu or {}).get(conv))
        if n + 1 > self._max_reports:  # keep every other row, the latest included
            for columns in (self.reports, self.mfu):
                columns.update({key: column[n % 2::2] for key, column in columns.items()})

    def to_dict(self) -> dict[str, Any]:
        """The ``curves.json`` document."""
        series = {}
        with self.views.lock:
            for name, d in self.views.decimators.items():
                if name in LOSS_SERIES and d.x_kind == "step":
                    xs, ys = d.columns(include_open=True)
                    series[name] = {"step": [int(x) for x in xs], "value": ys, "count": d.count}
        return {"schema_version": CURVES_SCHEMA_VERSION, "series": series, "reports": dict(self.reports),
                "mfu": dict(self.mfu)}


def write_curves(run_dir: Path, doc: dict[str, Any]) -> None:
    """Write ``curves.json`` atomically (non-finite floats as null; ``OSError`` leaves no temporary file)."""
    write_file_atomic(run_dir / CURVES_FILE, compact_json(doc))  # each NaN gap becomes null


def curves_from_events(path: Path, max_bytes: int = REPLAY_MAX_BYTES) -> dict[str, Any]:
    """The curves of an ``events.jsonl`` (old or unfinished runs), its first ``max_bytes``; ``OSError`` (Damaged)."""
    curves = Curves()
    origin = None  # a resumed run's first step of the training, less one: its report rows' steps are its own
    for rec in iter_events(path, kinds=("steps", "series", "interval"), max_bytes=max_bytes):
        kind = rec.get("kind")
        if kind == "steps" and origin is None:
            origin = step_origin(rec)
        elif kind == "series" and rec.get("name") in LOSS_SERIES:
            values = [float("nan") if v is None else v for v in rec.get("value", [])]
            curves.add_series(rec["name"], rec.get("step", []), values)
        elif kind == "interval":
            curves.add_report(step=rec.get("step", 0) + (origin or 0), tokens=rec.get("tokens", 0),
                              elapsed_s=rec.get("elapsed_s", 0.0),
                              tokens_per_s=(rec.get("throughput") or {}).get("train_tokens_per_s"),
                              mfu={k[4:-1]: v for k, v in (rec.get("compute") or {}).items() if k.startswith("mfu[")})
    return curves.to_dict()


def interpolate(xs: list[float], table_x: list[float], table_y: list[float]) -> list[float]:
    """Piecewise-linear ``table_y`` at each of ``xs`` (``table_x`` increasing; clamped at the ends)."""
    out = []
    for x in xs:
        i = min(max(bisect_left(table_x, x), 1), len(table_x) - 1)
        x0, x1, y0, y1 = table_x[i - 1], table_x[i], table_y[i - 1], table_y[i]
        out.append(y0 if x <= x0 else y1 if x > x1 else y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return out


class CurvesRecorder(ExtensionBase):
    """Bounded curves for run comparison (name ``curves``)."""

    name = "curves"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)
    requires = ("compute",)  # each report's row holds compute's MFU of the same report

    def __init__(self) -> None:
        self.curves = Curves()
        self._m: RunContext | None = None

    def start(self, monitor: RunContext) -> None:
        """Subscribe to the run's decimated views of the loss series."""
        self._m = monitor
        self.curves = Curves(views=monitor.series_views)

    after_fork_in_child = start  # in a forked child: the curves of the child's own run (docs/spec.md section 19)

    def stop(self) -> None:
        """Nothing to release (the final report feeds the last points)."""

    def on_report(self, report: Report) -> dict[str, Any]:
        """Hand this report's points and row to the report worker; nothing goes to the run log."""
        if (m := self._m) is None:
            return {}
        compute = m.extension("compute")
        mfu = compute.mfu_by_convention() if compute is not None else {}
        row = {"step": report.steps + m.step_origin, "tokens": report.tokens, "elapsed_s": report.elapsed_s,
               "tokens_per_s": report.interval.train_tokens_per_s if report.interval else None, "mfu": mfu}
        m.worker.submit(self.name, lambda: self._feed(report.ends, row))
        return {}

    def _feed(self, ends: Mapping[str, int] | None, row: dict[str, Any]) -> None:
        """Decimate the losses up to the report's ``ends`` and add its row (the report worker's thread)."""
        self.curves.views.catch_up(ends)
        self.curves.add_report(**row)

    def passport_section(self) -> dict[str, Any]:
        """Write ``curves.json``; the passport's ``curves`` names it and its size."""
        if (m := self._m) is None or m.run_dir is None:
            return {"file": None}
        built: dict[str, Any] = {}
        m.worker.submit(self.name, lambda: built.update(doc=self.curves.to_dict()))  # after every report's points
        m.worker.drain()
        doc = built["doc"] if "doc" in built else self.curves.to_dict()  # the worker disabled this wing: as it stands
        write_curves(m.run_dir, doc)
        return {"file": CURVES_FILE, "reports": len(doc["reports"]["step"]),
                "points": {name: len(s["step"]) for name, s in doc["series"].items()}}


X_KINDS = ("tokens", "flops", "time", "step")
Y_KINDS = ("train_loss", "val_loss", "tokens_per_s", "mfu")
EMPTY_CURVES: dict[str, Any] = {"series": {}, "reports": {c: [] for c in REPORT_COLUMNS}, "mfu": {}}
"""The curves of a run with none readable."""
CURVES_TYPES: dict[str, tuple[type, ...]] = {"series": (dict,), "reports": (dict,), "mfu": (dict,),
                                             "events_bytes": (int,)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """One run's line (``run``: the legend label; ``x`` and ``y`` of one length, NaN a gap), or why it has none."""

    run: str
    x: list[float]
    y: list[float]
    missing: str | None = None


def load_curves(run: Any) -> dict[str, Any]:
    """A run's curves: ``curves.json``, else built from ``events.jsonl`` (cached for a finished run); damaged: none."""
    events = run.dir / LOG_FILE
    size = None
    with contextlib.suppress(OSError), open_regular(events) as f:  # missing, or not a regular file: None
        size = os.fstat(f.fileno()).st_size
    with contextlib.suppress(OSError):  # missing, or damaged (Damaged): built again from the log
        doc = read_json(run.dir / CURVES_FILE, types=CURVES_TYPES)
        if doc.get("events_bytes") is None or size is None or size == doc["events_bytes"]:
            return doc
    if size is None or run.damaged:
        return dict(EMPTY_CURVES)
    try:
        doc = curves_from_events(events)
    except OSError:
        return dict(EMPTY_CURVES)
    if run.passport.get("status"):  # finished: cache it (keyed on the log's size)
        doc["events_bytes"] = size
        with contextlib.suppress(OSError):
            write_curves(run.dir, doc)
    return doc


def convention_of(passport: dict[str, Any], convention: str | None) -> str | None:
    """The FLOPs convention to use: the one asked for, else the run's own, else the one its MFU tile showed
    (compute/card.py: ``counted`` for a model with no convention, else the lowest of the range over conventions)."""
    compute = passport.get("compute") or {}
    if convention or compute.get("convention"):
        return convention or compute.get("convention")
    mfu = compute.get("mfu") if isinstance(compute.get("mfu"), dict) else {}
    if compute.get("conventions_missing"):
        return "counted" if mfu.get("counted") is not None else None
    shown = {c: v for c, v in mfu.items() if c != "counted" and isinstance(v, int | float)}
    return min(shown, key=shown.__getitem__) if shown else None


def x_label(x: str, unit: str, convention: str | None) -> str:
    """Axis label naming the unit (and the FLOPs convention)."""
    return {"tokens": f"{unit} trained", "step": "optimizer step", "time": "session time (s)",
            "flops": f"training FLOPs ({convention or 'no convention'} convention)"}[x]


def y_label(y: str, unit: str, convention: str | None) -> str:
    """Axis label naming the unit (and the MFU convention)."""
    return {"train_loss": "train_loss", "val_loss": "val_loss", "tokens_per_s": f"training-only {unit}/s",
            "mfu": f"MFU ({convention or 'no convention'}, 0-1)"}[y]


def make_line(name: str, passport: dict[str, Any], doc: dict[str, Any], x: str, y: str,
              convention: str | None, budget_points: int) -> Line:
    """The line of run ``name`` for ``y`` against ``x``, at most ``budget_points`` points."""
    conv = convention_of(passport, convention)
    fpt, col = None, {"step": "step", "time": "elapsed_s", "tokens": "tokens", "flops": "tokens"}[x]
    if x == "flops":
        fpt = ((passport.get("compute") or {}).get("flops_per_token") or {}).get(conv) if conv else None
        if fpt is None:
            why = "no FLOPs convention named" if conv is None else f"no FLOPs per token under {conv}"
            return Line(run=name, x=[], y=[], missing=why)
    reports = doc.get("reports") or {}
    if y in ("train_loss", "val_loss"):
        s = (doc.get("series") or {}).get(y)
        if not s or not s.get("step"):
            return Line(run=name, x=[], y=[], missing=f"no {y} recorded")
        if x != "step" and not reports.get("step"):
            return Line(run=name, x=[], y=[], missing="no report rows to place the points on this axis")
        xs = [float(v) for v in s["step"]]
        ys = [float("nan") if v is None else float(v) for v in s["value"]]
        if x != "step":  # the report rows' column at each point's step, piecewise linear from (0, 0)
            xs = interpolate(xs, [0.0, *map(float, reports["step"])], [0.0, *map(float, reports[col])])
            xs = [v * fpt for v in xs] if fpt is not None else xs
    else:
        if y == "mfu" and conv is None:
            return Line(run=name, x=[], y=[], missing="MFU needs a named convention")
        values = ((doc.get("mfu") or {}).get(conv) if y == "mfu" else reports.get("tokens_per_s")) or []
        keep = [i for i, v in enumerate(values) if v is not None]
        if not keep:
            why = (passport.get("compute") or {}).get("mfu_missing") if y == "mfu" else None
            return Line(run=name, x=[], y=[], missing=f"no {y} recorded" + (f" ({why})" if why else ""))
        xs = [float(reports[col][i]) * (fpt if fpt is not None else 1.0) for i in keep]
        ys = [float(values[i]) for i in keep]
    if len(xs) > budget_points:
        xs, ys = decimate(xs, ys, budget_points)
    return Line(run=name, x=xs, y=ys)


def training_curves(run_dir: Path, passport: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The curves of the training run ``run_dir`` (with ``passport`` and curves ``doc``) ends: each earlier run's
    points and report rows up to the step the next resumed from, then its own; loss points and rows at steps of the
    training (as recorded), tokens of the training (``None`` where a run's were not counted), session seconds summed
    over the runs (restart time left out). ``doc`` itself when the run resumed none."""
    earlier = earlier_runs(run_dir, (passport.get("lineage") or {}).get("runs"))
    if not earlier:
        return doc
    parts = []
    for folder, upto in earlier:
        try:
            run = load(folder)
            parts.append((run.passport, load_curves(run), upto))
        except (OSError, ValueError):  # gone or damaged: that part of the curve is missing
            parts.append(({}, dict(EMPTY_CURVES), upto))
    parts.append((passport, doc, None))
    series: dict[str, dict[str, list[Any]]] = {}
    rows: dict[str, list[Any]] = {c: [] for c in EMPTY_CURVES["reports"]}
    mfu: dict[str, list[Any]] = {}
    t0_s = 0.0
    for p, d, upto in parts:
        for name, s in (d.get("series") or {}).items():
            keep = [i for i, step in enumerate(s.get("step") or []) if upto is None or step <= upto]
            joined = series.setdefault(name, {"step": [], "value": []})
            joined["step"] += [s["step"][i] for i in keep]
            joined["value"] += [s["value"][i] for i in keep]
        reports, before = d.get("reports") or {}, (p.get("lineage") or {}).get("before")
        before = before.get("tokens") if isinstance(before, dict) else 0  # the training's when the run began
        keep = [i for i, step in enumerate(reports.get("step") or []) if upto is None or step <= upto]
        n = len(rows["step"])
        rows["step"] += [reports["step"][i] for i in keep]
        rows["tokens"] += [None if before is None else before + reports["tokens"][i] for i in keep]
        rows["elapsed_s"] += [t0_s + reports["elapsed_s"][i] for i in keep]
        rows["tokens_per_s"] += [reports["tokens_per_s"][i] for i in keep]
        for conv, values in (d.get("mfu") or {}).items():
            mfu.setdefault(conv, [None] * n).extend(values[i] for i in keep)
        for values in mfu.values():
            values.extend([None] * (len(rows["step"]) - len(values)))
        t0_s = rows["elapsed_s"][-1] if rows["elapsed_s"] else t0_s
    return {"series": series, "reports": rows, "mfu": mfu}
