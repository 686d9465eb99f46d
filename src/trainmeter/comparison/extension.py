"""The curves recorder (name ``curves``): keeps a run's bounded curves and writes ``curves.json`` (docs/spec.md 15).

The report worker alone adds the rows of :attr:`CurvesRecorder.curves` and catches its losses up to each report
(docs/spec.md section 20); the losses are the run's decimated views (core/series_views.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmeter.comparison.curves import CURVES_FILE, Curves, write_curves
from trainmeter.core.extension import ExtensionBase, Report

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext


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
        m = self._m
        if m is None:
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
        m = self._m
        if m is None or m.run_dir is None:
            return {"file": None}
        built: dict[str, Any] = {}
        m.worker.submit(self.name, lambda: built.update(doc=self.curves.to_dict()))  # after every report's points
        m.worker.drain()
        doc = built["doc"] if "doc" in built else self.curves.to_dict()  # the worker disabled this wing: as it stands
        write_curves(m.run_dir, doc)
        return {"file": CURVES_FILE, "reports": len(doc["reports"]["step"]),
                "points": {name: len(s["step"]) for name, s in doc["series"].items()}}
