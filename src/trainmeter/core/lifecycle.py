"""A run's lifecycle: start and finish run part by part, once each, with Ctrl-C held back and SIGTERM handled."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import datetime, timezone
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.heartbeat import Heartbeat
from trainmeter.core.interrupts import HeldInterrupts, TerminateHandler, run_parts
from trainmeter.core.memory import MemoryProbe

END_WAIT_S = 60.0  # every wait at a run's end, in all (docs/spec.md section 20, "The end's bound")


def exit_status(exc: BaseException | None) -> tuple[str, BaseException | None]:
    """The passport's ``status`` of a body that ended with ``exc`` (``None``: returned), and the error to record."""
    if exc is None:
        return "completed", None
    if isinstance(exc, SystemExit):
        return ("completed", None) if exc.code in (0, None) else ("failed", exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", exc
    return "failed", exc


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Lifecycle:
    """Start, finish and SIGTERM of one run (the monitor ``run``), and the run's status fields (written here only).
    Training thread, except :meth:`retry_passport` (any thread) and the SIGTERM callbacks."""

    def __init__(self, run: Any, finish_imports: Callable[[], None] | None = None, *, probes: bool = True,
                 cuda_memory: Callable[[], Any] | None = None) -> None:
        self._run = run
        self._want_probes = probes
        self._cuda_memory = cuda_memory
        self.probes: Any = None  # the torch probes once started (core/probes.py TorchProbes)
        self.memory_probe: MemoryProbe | None = None
        # on the training thread before the worker builds the passport: a thread of ours imports nothing
        self.finish_imports = finish_imports
        self._terminate: TerminateHandler | None = None
        self._terminate_lock = threading.Lock()
        self.heartbeat: Heartbeat | None = None  # the heartbeat thread's owner while the run is live
        self.run_dir: Any = None
        self.status = "starting"
        self.started_at: str | None = None
        self.ended_at: str | None = None
        self.error: str | None = None
        self.exit_code: int | str | None = None  # a failed run's SystemExit code
        self.finished = False
        self.end_wait_s = END_WAIT_S  # read here: tests set the module's constant
        self._end_began_s: float | None = None
        self.gave_up: list[dict[str, Any]] = []  # the wings the end gave up on (passport "end_gave_up")
        self._opened_record = False
        self._done: set[str] = set()

    def child_started(self) -> None:
        """A forked child's own run is running from now (its record is the rank's, opened lazily)."""
        self.run_dir = None
        self.status = "running"
        self.started_at = _utc_now()

    def set_run_dir(self, path: Any) -> None:
        """The run folder the record sink made."""
        self.run_dir = path

    def start(self) -> None:
        """Make the run folder, open the log, install probes, start the clocks, Ctrl-C held back (one, or an error,
        finishes the run and is re-raised). ``RuntimeError`` while another run is monitored in this process."""
        from trainmeter.core import monitor as slot

        run = self._run
        slot.save_unsaved(run.faults.say)
        held = HeldInterrupts()
        try:
            with held:
                with slot._ACTIVE_LOCK:
                    if slot._ACTIVE is not None:
                        raise RuntimeError(
                            f"a run ({slot._ACTIVE.options.name!r}) is already being monitored in this process; "
                            "finish it before starting another"
                        )
                    slot._ACTIVE = run
                try:
                    self._start_parts()
                except BaseException as exc:
                    self._finish_parts(*exit_status(exc))
                    raise
                if held.pending:
                    self._finish_parts("interrupted", KeyboardInterrupt())
        finally:
            held.deliver()  # a Ctrl-C held back is never swallowed, whatever else happened

    def _start_parts(self) -> None:
        run = self._run
        run.emitter.new_run(threading.get_ident())
        run.reporter.open_worker()  # on the training thread; its thread starts at the first job
        self.started_at = _utc_now()
        record = run.record_sink
        if record is not None:
            self._opened_record = True
            try:
                self.run_dir = record.open(run.context, self.started_at) or self.run_dir
            except Exception as exc:  # an unwritable run folder: the run goes on in memory
                run.warn_once("run-folder", f"run folder unavailable ({exc!r}): the record is kept in memory "
                                            "and the passport written at the end if the folder can be made then")
        self.memory_probe = MemoryProbe(self._cuda_memory, lambda: run.process_memory)
        # a noted SIGTERM (signal context, the watcher) makes the next step boundary a safe point: at_safe_point
        self._terminate = TerminateHandler(run.steps_state.report_now, self._terminate_save_now, self.at_safe_point)
        self._terminate.install()
        if self._want_probes and probes_available():
            from trainmeter.core.probes import TorchProbes

            self.probes = probes = TorchProbes(run)  # set first: a Ctrl-C inside start() still gets them removed
            try:
                probes.start()
            except Exception as exc:
                run.warn_once("torch-probes", f"torch probes disabled: {exc!r}")
                probes.stop()
                self.probes = None
        run.dispatch.start(run)  # each extension in order (a fault disables that event of that extension)
        run.steps_state.restart_clock(run.phases.begin())
        # bounded points between reports (docs/spec.md section 18)
        run.registry.watch(run.at_step, lambda: run.steps, lambda job: run.worker.submit("series-drain", job))
        self.status = "running"
        run.phases.resume_train()
        if record is not None or run.text:
            self.heartbeat = Heartbeat(run, run.steps_state.interval_s, run.faults.say)
            self.heartbeat.start()

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """End the run, each part once, Ctrl-C held back (then raised as KeyboardInterrupt)."""
        raised = False
        held: HeldInterrupts | None = None
        for _ in range(3):  # a Ctrl-C before the handler was in place: finish again (parts run once)
            try:
                with HeldInterrupts() as held:
                    raised = self._finish_parts(status, error) or raised
                break
            except KeyboardInterrupt:
                raised = True
        if held is not None:
            held.deliver()  # a Ctrl-C held back meanwhile: the previous handler raises it
        if raised:
            raise KeyboardInterrupt

    def _finish_parts(self, status: str, error: BaseException | None) -> bool:
        """Run the parts of finish not yet done; returns whether a KeyboardInterrupt was raised in one."""
        from trainmeter.core import monitor as slot

        run = self._run
        interrupted = False
        done = self._done
        try:
            if "status" not in done:
                done.add("status")
                self.finished = True
                self.status = status
                if error is not None:
                    self.error = f"{type(error).__name__}: {error}"
                if isinstance(error, SystemExit):
                    code = error.code
                    self.exit_code = code if isinstance(code, int) or code is None else str(code)[:200]
                self.ended_at = _utc_now()
                blind = host_patches.blind_message() if run.steps == 0 and self._opened_record else None
                if blind is not None:
                    run.warn_once("steps-unseen", blind)  # said once (core/explicit_steps.py), and in the passport
                run.registry.stop_watching()
                self._end_began_s = run.clock()
            worker = run.reporter.worker
            worker.wait_left_s = self.end_left_s  # every wait of the worker's from here draws from the end's bound
            parts: list[tuple[str, Callable[[], Any]]] = []
            if self.heartbeat is not None:
                parts.append(("heartbeat-stop", self.heartbeat.stop))
            # a steady report's job still queued runs before the wings stop (docs/spec.md section 20; bounded)
            parts.append(("report-drain", lambda: self._wait_for_worker("report-drain")))
            if run.probes is not None:
                parts.append(("torch-probes-stop", run.probes.stop))
            parts += run.dispatch.stop_parts()  # before the final report: spans they close are in its snapshot
            if run.phases.session_start_s is not None:
                parts += [("open-phase", run.spans.close), ("final-report", lambda: run.reporter.report(True))]
            if self._opened_record:
                parts += [("passport", self._passport_on_worker), ("log-close", run.record_sink.close)]
            parts.append(("report-worker-close", worker.close))  # drained by then: its thread ends

            def todo() -> Iterator[tuple[str, Callable[[], Any]]]:
                for key, fn in parts:
                    if key not in done:
                        done.add(key)  # each part once; one cut by a Ctrl-C runs once more (run_parts)
                        yield key, fn

            interrupted = run_parts(todo(), lambda key, exc: run.warn_once(
                key, f"{key} failed and was disabled: {exc!r}"))
        finally:
            if self._terminate is not None:
                self._terminate.remove()
            with slot._ACTIVE_LOCK:
                if slot._ACTIVE is run:
                    slot._ACTIVE = None
        if "closing" not in done and self._opened_record:
            done.add("closing")
            record = run.record_sink
            if not getattr(record, "passport_written", True):
                slot._UNSAVED = run  # kept (bounded: MAX_PENDING points per series) until tm.save() or the next run
            with suppress(Exception):
                run.faults.say(record.closing_line(run.context))
        return interrupted

    def _passport_on_worker(self) -> None:
        """Write the passport on the report worker while this thread waits, or here when it did not take it
        (docs/spec.md section 20, "Finish"). A failure is raised here."""
        run = self._run
        if self.finish_imports is not None:
            run.guard("finish-imports", self.finish_imports)
        claim = threading.Lock()  # whichever thread takes it writes: the worker, or this one after the wait
        failed: list[Exception] = []

        def job() -> None:
            if claim.acquire(blocking=False):
                try:
                    run.record_sink.write_passport(run.context)
                except Exception as exc:
                    failed.append(exc)

        run.reporter.worker.submit("passport", job)
        # the worker did not take it (stuck, disabled, or not yet), or the end gave up on it under way
        if not self._wait_for_worker("passport") or claim.acquire(blocking=False):
            run.record_sink.write_passport(run.context)
        if failed:
            raise failed[0]

    def end_left_s(self) -> float:
        """Seconds left of the end's bound (all of it before the end began). Any thread."""
        began = self._end_began_s
        return self.end_wait_s if began is None else max(0.0, began + self.end_wait_s - self._run.clock())

    def _wait_for_worker(self, part: str) -> bool:
        """Drain the report worker within the end's bound; past it, give up on the wing it runs: warned, in the
        passport, disabled (docs/spec.md section 20, "The end's bound"). Returns whether the worker drained."""
        run = self._run
        worker = run.reporter.worker
        if worker.drain(self.end_left_s()):
            return True
        thread, (owner, kind) = worker.thread, worker.running or ("report-worker", "job")
        wing, event = run.dispatch.calling(thread) or (owner, "")
        job = f"{event} in the {owner!r} {kind}" if event else f"the {owner!r} {kind}"
        run.dispatch.give_up(wing, thread)
        worker.disabled.add(wing)
        worker.abandon()
        waited_s = run.clock() - (self._end_began_s or 0.0)
        self.gave_up.append({"wing": wing, "job": job, "part": part, "waited_s": round(waited_s, 1)})
        run.warn_once("end-gave-up", f"the run's end gave up on {wing!r} after {waited_s:.0f} s: {job} on "
                      f"the report worker did not return within the end's bound ({self.end_wait_s:g} s); it is "
                      "left out of the final report and the passport, and its thread does nothing more")
        return False

    def retry_passport(self) -> bool:
        """Write the passport again after a disk fault at the end; returns whether it is on disk now. Never raises."""
        run = self._run
        record = run.record_sink
        if record is None:
            return True
        with HeldInterrupts():
            run.guard("passport-retry", record.write_passport, run.context)
            run.guard("log-close", record.close)
        return bool(getattr(record, "passport_written", True))

    # -- SIGTERM (docs/spec.md section 18) -------------------------------------------------------------------
    def at_safe_point(self) -> None:
        """Act on a noted SIGTERM at a step or emit boundary (docs/spec.md section 18)."""
        handler = self._terminate
        if handler is None or not handler.pending or not self._terminate_lock.acquire(blocking=False):
            return
        try:
            if handler.ends:
                self._finish_parts("terminated", None)  # its end restores the handler and re-delivers the signal
                handler.redeliver()
            else:
                handler.pending = False
                self.on_terminate()
        finally:
            self._terminate_lock.release()

    def _save_terminated(self, write: Callable[[Any], Any], restore: bool) -> None:
        """``write(record)`` with the status ``terminated`` as the run stands (``restore``: the run goes on)."""
        record = self._run.record_sink
        if record is None or not self._opened_record or self.finished:
            return
        status, ended_at = self.status, self.ended_at
        self.status, self.ended_at = "terminated", _utc_now()
        try:
            write(record)
        finally:
            if restore:
                self.status, self.ended_at = status, ended_at

    def _terminate_save_now(self) -> None:
        """The watcher's save when no safe point came: the passport as the run stands (the process ends next)."""
        if self._terminate_lock.acquire(blocking=False):  # taken: the training thread is finishing it
            try:
                self._save_terminated(lambda record: (record.write_passport(self._run.context), record.close()), False)
            finally:
                self._terminate_lock.release()

    def on_terminate(self) -> None:
        """SIGTERM with the program's own handler in place: save a passport as the run stands and go on."""
        run = self._run
        with suppress(BaseException):
            run.warn_once("sigterm", f"SIGTERM at step {run.steps_state.steps}: the program's own handler ran and "
                                     "the run went on; a passport was saved at that point")
            self._save_terminated(lambda record: run.guard("passport", record.write_passport, run.context), True)


def probes_available() -> bool:
    """Whether torch is importable (the probes need it); imports nothing."""
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None
