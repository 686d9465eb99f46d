"""The record sink of a run (:class:`trainmeter.core.sink.RecordSink`): run folder, run log (its columns and interval
records), text line, closing line, passport.

Disk faults never stop or slow the training: writes are retried with back-off and the gap recorded (docs/spec.md
section 18). Training thread, or the report worker for a steady report or a drain, up to the series' ends (docs/spec.md
section 20).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from trainmeter.core.context import RunContext
from trainmeter.core.explicit_steps import steps_unknown
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.throughput import tokens_missing
from trainmeter.record.events import LOG_FILE
from trainmeter.record.passport import describe_environment, headline, record_options, write_passport
from trainmeter.record.runlog import ColumnLines, RunLog, micros, upto
from trainmeter.record.runs import make_run_dir
from trainmeter.record.textline import format_line, seed_values

RETRY_FIRST_S = 5.0
RETRY_MAX_S = 120.0
MAX_GAPS = 100


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return repr(exc)


def column_kinds(run: Any) -> list[tuple[str, Series | StepSeries]]:
    """Each series with its column record's kind: the step series' ``steps``, then every ``series``."""
    return [("steps", run.step_series), *(("series", series) for series in list(run.series.values()))]


def write_columns(log: RunLog, cursors: dict[str, int], kind: str, series: Series | StepSeries,
                  ahead: ColumnLines | None = None, stop: int | None = None) -> None:
    """Append ``series``' points since its cursor (before position ``stop``) as a ``kind`` record, joined to ahead."""
    start = cursors.get(series.name, 0)
    if stop is not None and stop <= start:
        return  # written up to there already (a drain queued before a report of the training thread's)
    if (encoded := ahead.line(kind, series, start, stop) if ahead is not None else None) is not None:
        line, cursors[series.name] = encoded
        log.append_line(line)
        return
    end, steps, times, values = upto(series.read(start), stop)
    if steps:
        # integer microseconds: encoding an int costs a fraction of a float's shortest repr; map runs no bytecode
        # per point (float.__mul__ is the product t * 1e6 bit for bit)
        log.write(kind, name=series.name, x=series.x_kind, step=steps, t_us=micros(times), value=values)
    cursors[series.name] = end


def format_text(m: RunContext) -> str:
    """The text line of the last report (docs/spec.md section 7)."""
    interval = m.interval
    mem = total = None
    if m.memory is not None:
        cuda = m.memory.cuda or {}
        if cuda.get("allocated_bytes") is not None:
            peak = cuda.get("peak_allocated_bytes")
            mem = peak if peak is not None else cuda.get("allocated_bytes")
            total = cuda.get("device_total_bytes")
        else:
            mem = m.memory.rss_bytes
            total = getattr(m.memory, "host_total_bytes", None)
    unit = None if m.token_unit is None else "tok" if m.token_unit == "tokens" else "samples"
    mfu = loss_ema = None
    extra: dict[str, str] = {}
    for fields in m.text_fields():
        mfu = fields.pop("mfu", mfu)
        loss_ema = fields.pop("loss_ema", loss_ema)
        extra.update(fields)
    latest = {name: s.stats().last for name, s in m.series.items() if s.x_kind == "step"}
    return format_line(m.steps, series=seed_values(latest), loss_ema=loss_ema,
                       tokens_per_s=interval.train_tokens_per_s if interval else None,
                       token_unit=unit, mfu=mfu, mem_used_bytes=mem, mem_total_bytes=total, extra=extra)


def summary_line(m: RunContext, saved: str | None = None, passport: dict[str, Any] | None = None) -> str:
    """One closing line saying where the record is (``saved``: default "passport in <run folder>"), with the figures
    of the ``passport`` written (else the run's own): docs/spec.md section 7."""
    stopped = getattr(getattr(m, "controls", None), "stopped", None)
    status = f"{m.status} by {stopped.by} at step {stopped.step}" if stopped is not None else m.status
    saved = saved if saved is not None else f"passport in {m.run_dir}"
    if steps_unknown(m):
        return (f"trainmeter: run {m.options.name!r} {status}, steps unknown (backward calls with no optimizer step "
                f"trainmeter knows: call tm.step() after each update); {saved}")
    if passport is None:
        missing = tokens_missing(m)
        passport = {"steps": m.steps, "tokens": None if missing else m.tokens, "token_unit": m.token_unit,
                    "tokens_missing": missing,
                    "throughput": {"session_tokens_per_s": m.session.session_tokens_per_s if m.session else None}}
    return f"trainmeter: run {m.options.name!r} {status} after {headline(passport)}; {saved}"


class RunRecorder:
    """Writes ``<run root>/<UTC>-<name>/events.jsonl`` at each report and the passport at the end; ``gaps``: closed
    spans the record could not be written (``gap`` records' fields)."""

    def __init__(self, after_passport: Callable[[RunContext], None] | None = None) -> None:
        self.after_passport = after_passport  # the wiring's: e.g. the replay's dashboard.json; must not raise
        self._log: RunLog | None = None
        self._cursor: dict[str, int] = {}
        self._ahead = ColumnLines()  # the columns' JSON, encoded by the report worker between reports
        self._root: Path | None = None
        self._start_fields: dict[str, Any] = {}
        self._retry_at_s = 0.0
        self._backoff_s = RETRY_FIRST_S
        self._gap: dict[str, Any] | None = None
        self.gaps: list[dict[str, Any]] = []
        self.failed_writes = 0
        self.passport: dict[str, Any] | None = None  # as written (None: not on disk): the closing line's figures
        self.passport_error: str | None = None
        self._start_written = False
        self._seat: Any = None
        self._lock = threading.RLock()

    def open(self, run: RunContext, started_at: str) -> Path | None:
        """Make the run folder (its root made absolute: a later ``os.chdir`` changes nothing), open the run log,
        write ``start``; register the log as a series reader. ``None`` (warned) when the folder cannot be made."""
        self._root = Path(run.options.run_root).expanduser().absolute()
        self._start_fields = {"name": run.options.name, "started_at": started_at,
                              "options": record_options(run.options), "environment": describe_environment()}
        with contextlib.suppress(Exception):  # this process's seat when it is a rank of a launch (trainmeter.ranks)
            from trainmeter.ranks.seating import seat_for

            self._seat = seat_for(self._root, run.options.name, datetime.fromisoformat(started_at))
        self._cursor = run.add_reader(lambda ends: self._drain(run, ends))
        if (worker := getattr(run, "worker", None)) is not None:
            worker.every("run-log", lambda: self._ahead.encode_ahead([s for _, s in column_kinds(run)], self._cursor))
        self._try_open(run)
        return run.run_dir

    def _try_open(self, run: RunContext) -> bool:
        if not self._start_fields:  # a Ctrl-C cut the start before open: the folder is made at the end
            if run.started_at is None:
                return False
            self.open(run, run.started_at)
            return self._log is not None
        try:
            if run.run_dir is None:
                run.set_run_dir(self._seat.dir if self._seat is not None else
                                make_run_dir(self._root or Path("."), run.options.name,
                                             datetime.fromisoformat(self._start_fields["started_at"])))
            self._log = RunLog(run.run_dir / LOG_FILE)
            if not self._start_written:
                self._log.write("start", **self._start_fields)
                if self._seat is not None:  # one rank of a launch: say which, in its own log
                    launch_dir = os.path.relpath(self._seat.launch_dir, run.run_dir)  # relative: no user name
                    self._log.write("rank", launch_dir=launch_dir, pid=os.getpid(),
                                    device=getattr(self._seat, "device", None), **self._seat.identity.to_dict())
                self._log.flush()
                self._start_written = True
            return True
        except OSError as exc:
            self._log = None
            self._failed(run, exc, "the run folder")
            return False

    def write_interval(self, run: RunContext, elapsed_s: float, phases_s: dict[str, float], extra: dict[str, Any]) -> None:
        """Write the columns since the last report (up to its ends when written later: core.reports.ReportSnapshot) and
        one ``interval`` record, then flush (after a failure, not before the back-off has passed); no ``OSError``."""
        ends, interval, session = getattr(run, "report_ends", None), run.interval, run.session

        def body(log: RunLog, cursors: dict[str, int]) -> None:
            for kind, series in column_kinds(run):
                write_columns(log, cursors, kind, series, self._ahead,
                              None if ends is None else ends.get(series.name, None if kind == "steps" else 0))
            log.write(
                "interval", step=run.steps, tokens=run.tokens, token_unit=run.token_unit, elapsed_s=elapsed_s,
                phases_s=phases_s, throughput={
                    "train_tokens_per_s": interval.train_tokens_per_s if interval else None,
                    "seconds_per_step": interval.seconds_per_step if interval else None,
                    "session_tokens_per_s": session.session_tokens_per_s if session else None,
                    "window_tokens": interval.tokens if interval else 0,
                    "window_steps": interval.steps if interval else 0,
                    "window_train_s": interval.train_s if interval else 0.0,
                }, memory=run.memory.to_dict() if run.memory else None, **extra)

        if elapsed_s >= self._retry_at_s:
            self._write(run, body)

    def _drain(self, run: RunContext, ends: dict[str, int]) -> None:
        """Write every series' columns up to ``ends`` between reports (a drain: the report worker; docs/spec.md
        section 18), so the points held stay bounded; the next ``interval`` record follows as before."""
        if run.elapsed_s() < self._retry_at_s:
            return
        self._write(run, lambda log, cursors: [write_columns(log, cursors, kind, series, self._ahead,
                                                             ends.get(series.name, 0))
                                               for kind, series in column_kinds(run)])

    def _write(self, run: RunContext, body: Callable[[RunLog, dict[str, int]], Any]) -> None:
        with self._lock:  # a drain on the report worker, a report on the training thread
            if self._log is None and not self._try_open(run):
                return
            assert self._log is not None
            cursors = dict(self._cursor)
            # points trimmed from memory before the log could take them (the pending cap: kept from end - pending)
            dropped = sum(max(0, s.end - s.pending - self._cursor.get(s.name, 0)) for _, s in column_kinds(run))
            try:
                if self._gap is not None:
                    self._gap.update(to_step=run.steps, dropped_points=self._gap["dropped_points"] + dropped)
                    self._log.write("gap", **self._gap)
                body(self._log, cursors)
                self._log.flush()
            except OSError as exc:  # the flush dropped what it could not write
                self._failed(run, exc, "the run log")
                return
            self._cursor.update(cursors)  # in place: the monitor trims by this map
            if self._gap is not None and len(self.gaps) < MAX_GAPS:
                self.gaps.append(self._gap)
            self._gap = None
            self._backoff_s = RETRY_FIRST_S
            self._retry_at_s = 0.0

    def _failed(self, run: RunContext, exc: BaseException, what: str) -> None:
        self.failed_writes += 1
        if self._gap is None:
            self._gap = {"from_step": run.steps, "to_step": None, "failed_writes": 0, "dropped_points": 0,
                         "error": _reason(exc)}
        self._gap["failed_writes"] += 1
        self._retry_at_s = run.elapsed_s() + self._backoff_s
        self._backoff_s = min(RETRY_MAX_S, self._backoff_s * 2)
        where = run.run_dir or self._root
        run.warn_once("record-write",
                      f"cannot write {what} in {where} ({_reason(exc)}) at step {run.steps}: training goes on; "
                      f"the record is incomplete from there, its points are kept in memory and written when "
                      f"writes succeed again (retried with back-off up to {RETRY_MAX_S:g} s)")

    def write_heartbeat(self, fields: dict[str, Any]) -> None:
        """Append a ``heartbeat`` record now (the heartbeat's thread; one ``write``, no lock). Never raises."""
        if (log := self._log) is not None:
            log.write_now("heartbeat", **fields)

    def write_checkpoint(self, entry: dict[str, Any], renamed_from: str | None = None) -> None:
        """Append one ``checkpoint`` record now, as it is recorded (a kill after it leaves it in the log; docs/spec.md
        section 6): ``entry`` is the passport's ``checkpoints`` entry. Training thread (one ``write``). Never raises."""
        if (log := self._log) is not None:
            log.write_now("checkpoint", **{k: entry.get(k) for k in ("step", "path", "bytes", "source")},
                          **({"renamed_from": renamed_from} if renamed_from is not None else {}))

    text_line = staticmethod(format_text)  # the text line of the last report

    def record_section(self, run: RunContext) -> dict[str, Any]:
        """The passport's ``record`` section: is the saved record complete, and where not."""
        gaps = [*self.gaps, *([self._gap] if self._gap is not None else [])]
        complete = not gaps and self.failed_writes == 0
        dropped = sum(g["dropped_points"] for g in gaps)
        # computed when the passport is written, so after a disk recovers it says what the log holds now
        points_whole = self._gap is None and dropped == 0
        spans = ", ".join(f"{g['from_step']}-{g['to_step'] if g['to_step'] is not None else 'end'}" for g in gaps[:5])
        first = gaps[0]["error"] if gaps else "?"
        summary = None if complete else (
            f"{self.failed_writes} failed writes between steps {spans}, recovered: every point was written once the "
            f"disk accepted writes again; the reports of those steps are missing; first error: {first}" if points_whole
            else f"{self.failed_writes} failed writes; the run log misses points between steps {spans} ({dropped} "
            f"points dropped from memory); first error: {first}")
        return {"complete": complete, "log": LOG_FILE if run.run_dir else None,  # relative to the run folder
                "failed_writes": self.failed_writes, "gaps": gaps, "points_complete": points_whole, "summary": summary}

    def write_passport(self, run: RunContext) -> None:
        """The points not yet written, passport.md, dashboard.json, the log's ``end`` record, then passport.json; tried
        whatever the back-off (the last chance); a failure is kept for the closing line and warnings, not raised."""
        self._write(run, lambda log, cursors: [write_columns(log, cursors, *pair) for pair in column_kinds(run)])
        if run.run_dir is None:
            self.passport_error = self._gap["error"] if self._gap else "no run folder"
            return
        ended: list[bool] = []

        def before_json() -> None:  # between passport.md and passport.json, written last (docs/spec.md section 6)
            if self.after_passport is not None:
                try:
                    self.after_passport(run)
                except Exception as exc:
                    run.warn_once("after-passport", f"the replay's dashboard file was not written: {exc!r}")
            ended.append(True)
            self._append_end(run)

        try:
            self.passport = write_passport(run, self.record_section(run), before_json)
            self.passport_error = None
        except OSError as exc:
            self.passport_error = _reason(exc)
            run.warn_once("passport-write", f"passport not written in {run.run_dir}: {self.passport_error}")
            if not ended:
                self._append_end(run)

        if self._seat is not None:  # the last rank to finish merges the launch's passport
            try:
                from trainmeter.ranks.merge import after_rank_finished

                after_rank_finished(self._seat)
            except Exception as exc:
                run.warn_once("ranks-merge", f"merging the launch's passport failed: {exc!r}")

    def _append_end(self, run: RunContext) -> None:
        if (log := self._log) is not None:
            log.write("end", status=run.status, ended_at=run.ended_at, error=run.error)
            with contextlib.suppress(OSError):  # the flush drops what it could not write
                log.flush()

    @property
    def passport_written(self) -> bool:
        """Whether the passport is on disk (``False`` after a disk fault at the end)."""
        return self.passport is not None

    def closing_line(self, run: RunContext) -> str:
        """One closing line: where the passport is, or why there is none; and whether the record is whole."""
        if self.passport is not None:
            saved = f"passport in {run.run_dir}"
            if self.failed_writes:
                saved += f" (record incomplete: {self.failed_writes} failed writes, see its 'record' section)"
        else:
            saved = (f"passport NOT written ({self.passport_error or 'no passport'}); "
                     f"run folder {run.run_dir or self._root}; it is kept in memory and written by tm.save() "
                     "or at the next monitored run once the disk accepts it")
        return summary_line(run, saved, self.passport)

    def abandon_in_child(self) -> None:
        """In a forked child: let go of the parent's run log without writing to it (docs/spec.md section 19)."""
        if self._log is not None:
            self._log.abandon()
            self._log = None

    def close(self) -> None:
        """Close the run log (idempotent; never raises ``OSError``)."""
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
