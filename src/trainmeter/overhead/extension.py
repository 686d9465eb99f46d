"""The monitor's own cost (name ``overhead``): the number to quote when asked whether monitoring slowed the run.

Definitions: docs/spec.md section 17 (thread CPU: the node sampler's, section 18). Thread safety: training thread
only, except ``panels`` which reads one dict reference.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from trainmeter.core.checkpoint_files import size_bytes
from trainmeter.core.extension import ExtensionBase, Report

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

SAMPLE_EVERY = 64  # the fewest steps between two timed ones
MAX_SAMPLE_EVERY = 4096  # the most
TIMED_SHARE = 1e-4  # the timed steps' bookkeeping, spread over the steps between them: at most this share of a step


class Overhead(ExtensionBase):
    """Measures what monitoring costs (name ``overhead``); ``perf_counter`` times the samples (tests inject one)."""

    name = "overhead"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)
    precedes = ("*",)  # first: at stop, the other wings' threads still run (their CPU is read once more)

    def __init__(self, perf_counter: Any = None) -> None:
        self._now = perf_counter or time.perf_counter
        self._m: RunContext | None = None
        self._timed = 0
        self._timed_s = 0.0
        self._t0 = 0.0
        self._t1: float | None = None
        self._reports_at_arm = 0  # the run's reports when the timed step was armed
        self.every = SAMPLE_EVERY  # steps from one timed step to the next (the stride in use)
        self._span_from: tuple[int, float] | None = None  # (steps, run clock) at the last timed step
        self._thread_cpu: dict[int, tuple[str, float]] = {}
        self._figures: dict[str, Any] = {}

    def start(self, monitor: RunContext) -> None:
        """Time the step rule on 1 step in :attr:`every` (through the core's timing hook, for that step only)."""
        self._m = monitor
        self._t0 = self._now()
        monitor.at_step(SAMPLE_EVERY - 1, self._arm)

    def _arm(self) -> None:
        """Time the next step's rule (``RunContext.time_next_step``; no code on other steps), from ``at_step``."""
        monitor = self._m
        if monitor is None or self._t1 is not None:
            return
        self._reports_at_arm = monitor.reports
        monitor.time_next_step(self._timed_step)

    def _timed_step(self, run_step: Any) -> None:
        """Time the step rule (a step that ran a report is left out), then arm the next timed step."""
        monitor: RunContext = self._m  # type: ignore[assignment]  # armed by start
        t0 = self._now()
        run_step()
        seconds = self._now() - t0
        if monitor.reports == self._reports_at_arm:
            self._timed_s += seconds
            self._timed += 1
        if self._t1 is None:
            self.every = self._next_every()
            monitor.at_step(monitor.steps_state.steps + self.every - 1, self._arm)

    def _next_every(self) -> int:
        """The stride to the next timed step: its bookkeeping (the mean timed ``on_step``) over that many steps at the
        mean step time since the last timed step (the run's clock) is at most ``TIMED_SHARE`` of a step."""
        rule = self._m.steps_state  # type: ignore[union-attr]
        steps, now_s = rule.steps, rule.now()
        last, self._span_from = self._span_from, (steps, now_s)
        if last is None or not self._timed or steps <= last[0] or now_s <= last[1]:
            return SAMPLE_EVERY
        step_s = (now_s - last[1]) / (steps - last[0])
        every = math.ceil(self._timed_s / self._timed / (TIMED_SHARE * step_s))
        return min(MAX_SAMPLE_EVERY, max(SAMPLE_EVERY, every))

    def stop(self) -> None:
        """Read the threads once more (they still run); no timed step is armed after this."""
        if self._m is None or self._t1 is not None:
            return
        self._read_threads()
        self._t1 = self._now()

    def _read_threads(self) -> None:
        board = getattr(self._m, "process_memory", None)
        cpu_s = getattr(board, "thread_cpu_s", None)  # posted by the node sampler's thread
        if not cpu_s:
            return
        names = {t.native_id: t.name for t in threading.enumerate() if t.name.startswith("trainmeter")}
        self._thread_cpu.update({tid: (names[tid], seconds) for tid, seconds in cpu_s.items() if tid in names})

    def figures(self, report: Report | None = None) -> dict[str, Any]:
        """The overhead figures now (the passport section's content), or at ``report`` (its phases and elapsed
        seconds: on the report worker the live ones moved on, docs/spec.md section 20)."""
        m = self._m
        wall_s = (self._t1 if self._t1 is not None else self._now()) - self._t0
        cpu_s = sum(c for _, c in self._thread_cpu.values()) if self._thread_cpu else None
        phases = report.phases_s if report is not None else m.phases.totals_s if m is not None else {}
        reporting_s = phases.get("reporting", 0.0)
        elapsed_s = report.elapsed_s if report is not None else m.elapsed_s() if m is not None else 0.0
        attach = sys.modules.get("trainmeter.widget.attach")  # the live widget's bytes sent, where it shows this run
        publisher = attach.live_publisher() if attach is not None else None
        live = publisher is not None and getattr(publisher, "monitor", None) is m
        browser = int(publisher.bytes_sent) if live else None
        log_bytes = size_bytes(m.run_dir / "events.jsonl") if m is not None and m.run_dir is not None else None

        def per_s(amount: float | None) -> float | None:
            return amount / wall_s if amount is not None and wall_s > 0 else None

        return {
            "on_step_us": self._timed_s / self._timed * 1e6 if self._timed else None,
            "on_step_samples": self._timed, "sample_every": self.every,
            "reporting_s": reporting_s, "reporting_share": reporting_s / elapsed_s if elapsed_s > 0 else None,
            "threads": {"cpu_s": cpu_s, "share_of_one_core": per_s(cpu_s),
                        "names": sorted({n for n, _ in self._thread_cpu.values()})},
            "browser_bytes": browser, "browser_bytes_per_s": per_s(browser),
            "run_log_bytes": log_bytes, "run_log_bytes_per_s": per_s(log_bytes),
            "wall_s": wall_s,
        }

    def on_report(self, report: Report) -> dict[str, Any]:
        """The figures so far (run log, panel)."""
        self._read_threads()
        self._figures = self.figures(report)
        return dict(self._figures)

    def panels(self) -> list[dict[str, Any]]:
        """A "Monitoring cost" panel (publisher thread; reads one dict reference)."""
        f = self._figures or {}  # before the first report: the rows without values (the panel keeps its place)
        threads = f.get("threads") or {}
        rows = [{"label": label, "value": value, "unit": unit, "provenance": prov} for label, value, unit, prov in (
            (f"on_step (us, 1 in {f.get('sample_every', self.every)} steps)", f.get("on_step_us"), "", "measured"),
            ("reporting share of session", f.get("reporting_share"), "fraction", "measured"),
            ("trainmeter threads (share of one core)", threads.get("share_of_one_core"), "fraction", "measured"),
            ("to the browser (bytes/s)", f.get("browser_bytes_per_s"), "", "counted"),
            ("run log", f.get("run_log_bytes"), "bytes", "counted"))]
        rows[3]["note"] = None if f.get("browser_bytes") is not None else "no live widget"
        return [{"id": "overhead", "title": "Monitoring cost", "rows": rows, "pending": not self._figures}]

    def passport_section(self) -> dict[str, Any]:
        """The passport's ``overhead`` section (docs/spec.md, "The monitor's own cost")."""
        self._figures = self.figures()
        return dict(self._figures)
