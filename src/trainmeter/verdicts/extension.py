"""The verdicts extension (name ``verdicts``): what is wrong with the run, one sentence each (docs/spec.md section 14).

At each report it hands copies of the new loss points and the report's numbers to the report worker, which alone
feeds :class:`~trainmeter.verdicts.rules.VerdictEngine`, in report order (docs/spec.md section 20); the readers
(``warnings``, ``view``, ``markers``, ``passport_section``) read its immutable tuple from any thread.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.series_views import SeriesReader
from trainmeter.verdicts.markers import markers
from trainmeter.verdicts.rules import ReportPoint, VerdictEngine
from trainmeter.verdicts.view import VerdictsView

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

LOSS_NAMES = ("train_loss",)
_GPU_FIELDS = ("util_gpu", "sm_activity", "tensor_activity")


class Verdicts(ExtensionBase):
    """Verdicts on the run (name ``verdicts``): it runs after every other wing."""

    name = "verdicts"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)
    requires = ("*",)  # last: it reads what the others recorded in the same report (the GPU's readings)

    def __init__(self) -> None:
        self.engine = VerdictEngine()
        self._m: RunContext | None = None
        self._reader: SeriesReader | None = None

    def start(self, monitor: RunContext) -> None:
        """Register as a series reader (so loss points wait for us before they are trimmed)."""
        self._m = monitor
        self._reader = SeriesReader(monitor, LOSS_NAMES, feed=self._feed)

    def stop(self) -> None:
        """Nothing to release (the final report feeds the last numbers)."""

    def _feed(self, points: list[tuple[str, list[int], list[float]]], report: ReportPoint | None = None) -> None:
        """Feed loss points (a report's, or a drain's between reports), then the report's numbers (worker thread)."""
        for name, steps, values in points:
            self.engine.add_losses(steps, values, name)
        if report is not None:
            self.engine.add_report(report)

    def on_report(self, report: Report) -> dict[str, Any]:
        """Hand this report's numbers to the report worker; the run log gets the verdicts fed so far."""
        m = self._m
        if m is None:
            return {}
        points = self._reader.new_points(report.ends)  # type: ignore[union-attr]  # made at start, with self._m
        gpu = m.extension("gpu")
        sampler = gpu.readings if gpu is not None else None
        latest = sampler.latest() if sampler is not None else {}
        mem, source = None, "allocator"
        if report.memory is not None:
            mem = (report.memory.cuda or {}).get("allocated_bytes")
            if mem is None:
                mem, source = report.memory.rss_bytes, "RSS"
        interval = report.interval
        point = ReportPoint(
            step=report.steps, elapsed_s=report.elapsed_s, tokens_per_s=interval.train_tokens_per_s if interval else None,
            token_unit=report.token_unit, mem_bytes=mem, mem_source=source, phases_s=dict(report.phases_s),
            gpus={i: {f: getattr(s, f, None) for f in _GPU_FIELDS} for i, s in latest.items()})
        m.worker.submit(self.name, lambda: self._feed(points, point))
        if report.final:
            m.worker.drain()  # the final report's verdicts hold every point
        return {"fired": [asdict(v) for v in self.engine.verdicts]}

    def view(self) -> VerdictsView:
        """The verdicts so far (the alerts wing reads them); any thread."""
        return VerdictsView(verdicts=tuple(asdict(v) for v in self.engine.verdicts))

    def warnings(self) -> list[str]:
        """One sentence per verdict (the monitor prints each once on the text line)."""
        return [v.sentence for v in self.engine.verdicts]

    def markers(self) -> list[dict[str, Any]]:
        """Chart markers of the verdicts so far (:mod:`trainmeter.verdicts.markers`); any thread."""
        return markers([asdict(v) for v in self.engine.verdicts])

    def passport_section(self) -> list[dict[str, Any]]:  # a list, not a dict: the passport's ``verdicts``
        """The passport's ``verdicts``: ``[{kind, step, sentence}]`` in the order they fired."""
        return [asdict(v) for v in self.engine.verdicts]
