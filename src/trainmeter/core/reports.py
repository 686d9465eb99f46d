"""Reports: at step or emit boundaries once ``interval_s`` has passed, a snapshot is summarised and written."""

from __future__ import annotations

import threading
import time
from typing import Any

from trainmeter.core.extension import Report
from trainmeter.core.interrupts import HeldInterrupts
from trainmeter.core.report_worker import REPORT_JOB, ReportWorker
from trainmeter.core.side_emits import OWNER_DRAIN
from trainmeter.core.throughput import interval_summary, session_summary

MAX_PENDING = 100_000
PHASE_REPORT_AFTER_S = 60.0
PHASE_REPORT_AFTER_INTERVALS = 10


class ReportSnapshot:
    """The run as a deferred report's job sees it: the report's step, tokens, throughput, memory and series ends
    (``report_ends``), read at the report on the training thread; every other attribute is the run's own (read
    and set through).

    Args:
        run: The monitor.
        report: The report (its ``steps`` and ``tokens``).
        interval: The report's ``IntervalSummary``.
        session: The report's ``SessionSummary``.
        memory: The report's memory sample.
    """

    __slots__ = ("_run", "steps", "tokens", "interval", "session", "memory", "report_ends")

    def __init__(self, run: Any, report: Report, interval: Any, session: Any, memory: Any) -> None:
        set_ = object.__setattr__
        set_(self, "_run", run)
        set_(self, "steps", report.steps)
        set_(self, "tokens", report.tokens)
        set_(self, "interval", interval)
        set_(self, "session", session)
        set_(self, "memory", memory)
        set_(self, "report_ends", report.ends)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_run"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_run"), name, value)


class Reports:
    """The report of one interval and the final one (a part of :class:`~trainmeter.core.monitor.Monitor`).

    Training thread, except :meth:`extension_warnings` (any thread).
    """

    dispatch: Any  # trainmeter.core.dispatch.Dispatcher
    _worker: ReportWorker | None = None

    @property
    def worker(self) -> ReportWorker:
        """The run's report worker (:mod:`~trainmeter.core.report_worker`): the wings hand it their per-point
        report work. Threaded when the clock is the real one (a fake clock's run runs each job at once).
        Made at start on the training thread; any thread."""
        return self._worker or self._open_worker()

    @property
    def open_worker(self) -> ReportWorker | None:
        """The run's report worker if one was made, else ``None`` (the fork handlers, docs/spec.md section 19)."""
        return self._worker

    def _open_worker(self) -> ReportWorker:
        self._worker = ReportWorker(threaded=self._now is time.perf_counter, on_fault=self._worker_fault,
                                    report_interval_s=self._interval_s)
        return self._worker

    def _worker_fault(self, owner: str, exc: BaseException) -> None:
        self.warn_once(f"report-worker-{owner}", f"{owner}'s report work failed and was disabled: {exc!r}")

    def _maybe_report(self) -> None:
        """Report if the interval has passed, on whichever training thread got here first (docs/spec.md section 3):
        never waits; a thread that finds another reporting goes on. A noted SIGTERM finishes the run here first."""
        terminate = self._terminate
        if terminate is not None and terminate.pending:
            self._terminate_at_safe_point()
        if self._finished or not self._report_lock.acquire(blocking=False):
            return
        try:
            if self.hot.now() >= self.hot.next_report_s:
                self._maybe_report_held()
        finally:
            self._report_lock.release()

    def _maybe_report_held(self) -> None:
        if self._phase_depth:
            # Reports wait for the phase to end (its time stays whole) unless it has been open for
            # PHASE_REPORT_AFTER_INTERVALS intervals (a phase never exited, or a very long eval):
            # then reports go on inside it and the phase is not credited with their time.
            opened_s = self.clock() - self._phase_started_s
            if opened_s < max(PHASE_REPORT_AFTER_S, PHASE_REPORT_AFTER_INTERVALS * self._interval_s):
                return
            self.warn_once(f"phase-open-{self._phase_name}",
                           f"phase {self._phase_name!r} has been open for {opened_s:.0f} s: reports continue inside "
                           "it (was its tm.phase block exited?)")
        held = HeldInterrupts()
        try:
            with held:  # a Ctrl-C never cuts a report between a write and its cursor
                t0 = self.clock()
                self._guard("report", self._report, False)
                if self._phase_depth:
                    self._phase_started_s += self.clock() - t0  # the report's time is reporting's, not the phase's
        finally:
            held.deliver()

    def _report(self, final: bool) -> None:
        resume = self.phases.training and not final
        self.phases.pause_train()
        t0 = self.clock()
        try:
            self._report_body(final, t0)
        finally:  # whatever failed, the timer advances and training resumes
            try:
                self.phases.finish_phase("reporting", t0)
            finally:
                self.hot.next_report_s = self.clock() + self._interval_s
                if resume:
                    self.phases.resume_train()

    def _report_body(self, final: bool, t0: float) -> None:
        steps, tokens = self.steps, self.tokens  # summed over the lanes
        self.interval = interval_summary(tokens=tokens - self._window_start_tokens,
                                         steps=steps - self._window_start_steps,
                                         train_s=self.phases.take_window_train_s())
        elapsed_s = self.phases.session_elapsed_s(t0)
        self.session = session_summary(tokens=tokens, elapsed_s=elapsed_s)
        phases_s = dict(self.phases.totals_s)
        self._window_start_tokens, self._window_start_steps = tokens, steps
        # lane 1's queues and held losses are its thread's: another lane's thread reporting leaves them to it
        if final:
            self._drain_queue()  # what other threads emitted and the folding thread has not yet recorded
        elif self._to_owner and threading.get_ident() == self._owner_ident:
            self._drain_owner(OWNER_DRAIN)
        if final or not self.lanes or threading.get_ident() == self._lane1_ident():
            self._poll_scalars(elapsed_s)
            if self.hot.losses or self.hot.held_step:
                self._flush_losses(float("inf") if final else self.hot.steps)
        if final:
            for lane in list(self.lanes):
                self._guard("lane-losses", self._flush_lane, lane)
        self._note_lane1_times()
        if self._memory_probe is not None:
            self.memory = self._guard("memory", self._memory_probe.sample)
        self.reports += 1
        worker = self.worker
        if not final and self.reports > 1 and worker.accepting and REPORT_JOB not in worker.disabled:
            # a steady report: the training thread keeps its own part and the snapshot, the worker the rest
            ends = {name: s.end for name, s in self.series.items()}
            ends[self.hot.step_series.name] = self.hot.step_series.end
            report = Report(steps=self.steps, tokens=self.tokens, elapsed_s=elapsed_s, final=final, phases_s=phases_s,
                            ends=ends)
            inline = self.dispatch.report(report, on_worker=False)
            view = ReportSnapshot(self, report, self.interval, self.session, self.memory)
            worker.submit(REPORT_JOB, lambda: self._report_out(view, report, inline, elapsed_s, phases_s))
            return
        report = Report(steps=self.steps, tokens=self.tokens, elapsed_s=elapsed_s, final=final, phases_s=phases_s)
        self._report_out(self, report, None, elapsed_s, phases_s)

    def _report_out(self, view: Any, report: Report, inline: dict[str, Any] | None, elapsed_s: float,
                    phases_s: dict[str, float]) -> None:
        """The report from the wings' fields on: the run log, trimming, the text line and warnings printed.

        On the training thread (``inline`` ``None``: every wing's fields taken here), or as the report worker's
        job of a steady report (``inline``: the fields the training thread took; ``view`` its snapshot)."""
        final = report.final
        if inline is None:
            extra = self.dispatch.report(report)
        else:
            extra = self.dispatch.report(report, on_worker=True, before=inline)
        if self._record is not None:
            self._guard("run-log", self._record.write_interval, view, elapsed_s, phases_s, extra)
            self._trim()
            self.text_line = self._guard("text-line", self._record.text_line, view) or self.text_line
        if self.text and not final:
            self._say(self.text_line)
            for warning in self.extension_warnings():
                if warning not in self._said_warnings:
                    self._said_warnings.add(warning)
                    self._say(f"trainmeter warning: {warning}")

    def _lane1_ident(self) -> int:
        """The thread of lane 1 (the probes' first training thread, else the thread that started the run)."""
        ident = getattr(self.probes, "hot_ident", 0) if self.probes is not None else 0
        return ident or self._owner_ident

    def _trim(self) -> None:
        """Drop points every reader has seen; keep at most ``MAX_PENDING`` per series."""
        if not self._readers:
            return
        for series in (self.hot.step_series, *self.series.values()):
            upto = min(cursor.get(series.name, 0) for cursor in self._readers)
            series.trim(max(upto, series.end - MAX_PENDING))

    def _write_passport(self) -> None:
        if self._record is not None:
            self._record.write_passport(self)

    def extension_warnings(self) -> list[str]:
        """Extensions' current warnings (a starving loader, a full disk, swap). Any thread."""
        return [str(w) for w in self.dispatch.collect("warnings")]

