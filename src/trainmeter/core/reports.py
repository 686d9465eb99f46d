"""Reports: at step or emit boundaries once ``interval_s`` has passed (docs/spec.md section 3; the worker: 20)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from trainmeter.core.extension import Report
from trainmeter.core.interrupts import HeldInterrupts
from trainmeter.core.report_worker import REPORT_JOB, ReportWorker
from trainmeter.core.throughput import IntervalSummary, SessionSummary, interval_summary, session_summary

PHASE_REPORT_AFTER_S = 60.0
PHASE_REPORT_AFTER_INTERVALS = 10


@dataclasses.dataclass(frozen=True, slots=True)
class ReportSnapshot:
    """The run as a deferred report's job sees it: the report's counts, summaries, memory and series ends
    (``report_ends``); every other attribute read from the run's context ``_run``. Read-only."""

    _run: Any
    steps: int
    tokens: int
    interval: Any
    session: Any
    memory: Any
    report_ends: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_run"), name)


class Reporter:
    """The reports of the monitor ``run`` and what the last one found. Training thread."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self.new_run()

    def new_run(self) -> None:
        """Nothing reported yet (a new run, a forked child)."""
        self._lock = threading.Lock()  # one reporting thread at a time, never waited for
        self._window_tokens = 0  # tokens and steps when the report window began
        self._window_steps = 0
        self.count = 0
        self.interval: IntervalSummary | None = None
        self.session: SessionSummary | None = None
        self.memory: Any = None
        self.text_line = ""

    opened_worker: ReportWorker | None = None  # the worker if one was made (the fork handlers: docs/spec.md §19)

    worker = property(lambda self: self.opened_worker or self.open_worker(),
                      doc="The run's report worker (threaded with the real clock). Any thread.")

    def open_worker(self) -> ReportWorker:
        """Make the worker (at start, on the training thread; its thread starts at the first job)."""
        run = self._run
        self.opened_worker = ReportWorker(threaded=run.steps_state.now is time.perf_counter,
                                          on_fault=self._worker_fault, report_interval_s=run.steps_state.interval_s)
        return self.opened_worker

    def _worker_fault(self, owner: str, exc: BaseException) -> None:
        self._run.warn_once(f"report-worker-{owner}", f"{owner}'s report work failed and was disabled: {exc!r}")

    def maybe_report(self) -> None:
        """Report if the interval has passed (a noted SIGTERM first); never waits (docs/spec.md section 3)."""
        run = self._run
        run.lifecycle.at_safe_point()
        if run.lifecycle.finished or not self._lock.acquire(blocking=False):
            return
        try:
            if run.steps_state.now() < run.steps_state.next_report_s:
                return
            spans = run.spans
            if spans.depth:
                # reports wait for the phase to end, unless it has been open long (never exited, a very long eval):
                # then they go on inside it and the phase is not credited with their time
                opened_s = spans.open_for_s()
                if opened_s < max(PHASE_REPORT_AFTER_S, PHASE_REPORT_AFTER_INTERVALS * run.steps_state.interval_s):
                    return
                run.warn_once(f"phase-open-{spans.name}",
                              f"phase {spans.name!r} has been open for {opened_s:.0f} s: reports continue inside "
                              "it (was its tm.phase block exited?)")
            held = HeldInterrupts()
            try:
                with held:  # a Ctrl-C never cuts a report between a write and its cursor
                    t0 = run.clock()
                    run.guard("report", self.report, False)
                    spans.exclude(run.clock() - t0)  # the report's time is reporting's, not the phase's
            finally:
                held.deliver()
        finally:
            self._lock.release()

    def report(self, final: bool) -> None:
        """Report now (``final``: the run's last, on the finishing thread). Training thread."""
        run = self._run
        phases = run.phases
        resume = phases.training and not final
        phases.pause_train()
        t0 = run.clock()
        try:
            self._body(final, t0)
        finally:  # whatever failed, the timer advances and training resumes
            try:
                phases.finish_phase("reporting", t0)
            finally:
                run.steps_state.reported(run.clock())
                if resume:
                    phases.resume_train()

    def _body(self, final: bool, t0: float) -> None:
        run = self._run
        rule = run.steps_state
        phases = run.phases
        steps, tokens = run.steps, run.tokens  # summed over the lanes
        read = run.token_unit is not None  # no batch read: no rate, never 0 (docs/spec.md section 3)
        self.interval = interval_summary(tokens=tokens - self._window_tokens, steps=steps - self._window_steps,
                                         train_s=phases.take_window_train_s(), read=read)
        elapsed_s = phases.session_elapsed_s(t0)
        self.session = session_summary(tokens=tokens, elapsed_s=elapsed_s, read=read)
        phases_s = dict(phases.totals_s)
        self._window_tokens, self._window_steps = tokens, steps
        # lane 1's queues and held losses are its thread's: another lane's thread reporting leaves them to it
        ident = threading.get_ident()
        if final:
            run.emitter.close()  # what other threads emitted and the folding thread has not yet recorded
        elif ident == run.emitter.owner_ident:
            run.emitter.drain_owner()
        lanes = run.lanes
        probes = run.probes  # lane 1: the probes' first training thread, else the thread that started the run
        if final or not lanes or ident == (getattr(probes, "hot_ident", 0) or run.emitter.owner_ident):
            rule.poll_scalars()
            if rule.pending_losses():
                rule.flush_losses(float("inf") if final else rule.steps)
        if final:
            for lane in list(lanes.lanes):
                run.guard("lane-losses", lanes.flush, lane)
        lanes.note_lane1_times()
        probe = run.lifecycle.memory_probe  # None before the start; a fault: None, warned once
        self.memory = run.guard("memory", probe.sample) if probe is not None else None
        self.count += 1
        report = Report(steps=steps, tokens=tokens, elapsed_s=elapsed_s, final=final, phases_s=phases_s,
                        interval=self.interval, memory=self.memory, token_unit=run.token_unit)
        worker = self.worker
        if not final and self.count > 1 and worker.accepting and REPORT_JOB not in worker.disabled:
            # a steady report: the training thread keeps its own part and the snapshot, the worker the rest
            ends = {name: s.end for name, s in run.series.items()}
            ends[rule.step_series.name] = rule.step_series.end
            report = dataclasses.replace(report, ends=ends)
            inline = run.dispatch.report(report, on_worker=False)
            view = ReportSnapshot(run.context, steps, tokens, self.interval, self.session, self.memory, ends)
            worker.submit(REPORT_JOB, lambda: self._out(view, report, inline, elapsed_s, phases_s))
            return
        self._out(run.context, report, None, elapsed_s, phases_s)

    def _out(self, view: Any, report: Report, inline: dict[str, Any] | None, elapsed_s: float,
             phases_s: dict[str, float]) -> None:
        """The run log, trimming, the text line and warnings (the worker's job when ``inline`` holds fields)."""
        run = self._run
        extra = run.dispatch.report(report, on_worker=None if inline is None else True, before=inline)
        record = run.record_sink
        if record is not None:
            run.guard("run-log", record.write_interval, view, elapsed_s, phases_s, extra)
            run.registry.trim()
            self.text_line = run.guard("text-line", record.text_line, view) or self.text_line
        if run.text and not report.final:
            run.faults.say(self.text_line)
            for warning in run.dispatch.collect("warnings"):  # a starving loader, a full disk, swap
                run.faults.say_once(f"trainmeter warning: {warning}")
