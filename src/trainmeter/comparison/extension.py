"""A run's curves, bounded, and their recorder (name ``curves``): decimated losses and one row per report, saved as
``curves.json`` (docs/spec.md section 15).

The losses are the run's decimated views (core/series_views.py: the widget draws the same buckets), or a view of
their own filled from a run log. Report rows are thinned to every other (the latest kept) over :data:`MAX_REPORTS`.
In a run the report worker alone adds the rows of :attr:`CurvesRecorder.curves` and catches its losses up to each
report (docs/spec.md section 20).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.series_views import SeriesViews
from trainmeter.lineage.view import step_origin
from trainmeter.record.events import iter_events

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

CURVES_FILE = "curves.json"
CURVES_SCHEMA_VERSION = 1
SERIES_BUDGET_POINTS = 2000
MAX_REPORTS = 4096
LOSS_SERIES = ("train_loss", "val_loss")
REPORT_COLUMNS = ("step", "tokens", "elapsed_s", "tokens_per_s")
MAX_LOG_BYTES = 512 * 1024 * 1024
"""Bytes of a run log read to build its curves (a bound, whatever the log's size)."""


class Curves:
    """Bounded curves of one run (see the module docstring): the losses of ``views`` (a live run's), else of a view
    filled by :meth:`add_series`."""

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


def write_curves(run_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``curves.json`` atomically (non-finite floats as null; ``OSError`` leaves no temporary file); its path."""
    from trainmeter.record.runlog import compact_json, write_file_atomic

    path = run_dir / CURVES_FILE
    write_file_atomic(path, compact_json(doc))  # each NaN gap becomes null
    return path


def curves_from_events(path: Path, max_bytes: int = MAX_LOG_BYTES) -> dict[str, Any]:
    """Build the curves document from an ``events.jsonl`` (old or unfinished runs), streaming its first ``max_bytes``
    (only ``series`` and ``interval`` lines parsed); ``OSError`` (``Damaged``) when it cannot be read."""
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

    def after_fork_in_child(self, monitor: RunContext) -> None:
        """In a forked child: the curves of the child's own run (docs/spec.md section 19)."""
        self.start(monitor)

    def stop(self) -> None:
        """Nothing to release (the final report feeds the last points)."""

    def on_report(self, report: Report) -> dict[str, Any]:
        """Hand this report's points and row to the report worker; nothing goes to the run log."""
        if (m := self._m) is None:
            return {}
        compute = m.extension("compute")
        mfu = compute.mfu_by_convention() if compute is not None else {}
        interval = report.interval
        row = {"step": report.steps + m.step_origin, "tokens": report.tokens, "elapsed_s": report.elapsed_s,
               "tokens_per_s": interval.train_tokens_per_s if interval else None, "mfu": mfu}
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
