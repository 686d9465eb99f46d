"""A run's lifecycle: start and finish run part by part, once each, with Ctrl-C held back and SIGTERM handled."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from trainmeter.core.heartbeat import Heartbeat
from trainmeter.core.interrupts import HeldInterrupts
from trainmeter.core.memory import MemoryProbe
from trainmeter.core.terminate import TerminateHandler

if TYPE_CHECKING:
    from trainmeter.core.monitor import Monitor


def exit_status(exc: BaseException | None) -> tuple[str, BaseException | None]:
    """The status of a monitored body that ended with ``exc`` (``None``: it returned), and the error to record.

    ``SystemExit(0)``, ``SystemExit(None)`` (``sys.exit()``) and ``SystemExit(False)`` are a normal exit:
    ``completed``. Other codes are ``failed`` (the code goes to the passport); KeyboardInterrupt is
    ``interrupted``; any other exception ``failed``.

    Examples:
        >>> exit_status(SystemExit(0))
        ('completed', None)
        >>> exit_status(SystemExit(2))[0]
        'failed'
    """
    if exc is None:
        return "completed", None
    if isinstance(exc, SystemExit):
        return ("completed", None) if exc.code in (0, None) else ("failed", exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", exc
    return "failed", exc


class Lifecycle:
    """Start, finish and SIGTERM of one run (a part of :class:`~trainmeter.core.monitor.Monitor`).

    The active-run slot (``_ACTIVE``, ``_UNSAVED``, ``_ACTIVE_LOCK``) stays in
    :mod:`trainmeter.core.monitor`, where the fork handlers and the API read and replace it.
    """

    # the monitor's fields this part reads and writes (set in Monitor.__init__)
    options: Any
    status: str
    error: str | None
    ended_at: str | None
    started_at: str | None
    run_dir: Any
    dispatch: Any
    # imports what the passport's build imports of ours, on the training thread before the worker builds it (the
    # wiring sets it: extensions.import_for_finish); a thread of ours imports nothing a fork or the user's thread
    # could meet half done
    finish_imports: Callable[[], None] | None = None

    def start(self) -> Monitor:
        """Make the run folder, open the log, install probes, start the clocks.

        Ctrl-C is held back until the run is fully started (or fully undone):
        a Ctrl-C or any error during start finishes the run (slot freed,
        patches and threads restored, passport written where a folder exists)
        and is then re-raised.

        Raises:
            RuntimeError: When another run is being monitored in this process.
            KeyboardInterrupt: When Ctrl-C arrived during start (after cleanup).
        """
        from trainmeter.core import monitor as slot

        slot.save_unsaved(self._say)
        held = HeldInterrupts()
        try:
            with held:
                with slot._ACTIVE_LOCK:
                    if slot._ACTIVE is not None:
                        raise RuntimeError(
                            f"a run ({slot._ACTIVE.options.name!r}) is already being monitored in this process; "
                            "finish it before starting another"
                        )
                    slot._ACTIVE = self
                try:
                    self._start_parts()
                except BaseException as exc:
                    self._finish_parts(*exit_status(exc))
                    raise
                if held.pending:
                    self._finish_parts("interrupted", KeyboardInterrupt())
        finally:
            held.deliver()  # a Ctrl-C held back is never swallowed, whatever else happened
        return self

    def _start_parts(self) -> None:
        self._owner_ident = threading.get_ident()
        self._open_worker()  # on the training thread; its thread starts at the first job
        now = datetime.now(timezone.utc)
        self.started_at = now.isoformat(timespec="seconds")
        if self._record is not None:
            self._started.append("record")
            try:
                self.run_dir = self._record.open(self, self.started_at)
            except Exception as exc:  # an unwritable run folder: the run goes on in memory
                self.warn_once("run-folder", f"run folder unavailable ({exc!r}): the record is kept in memory "
                                             "and the passport written at the end if the folder can be made then")
        self._memory_probe = MemoryProbe(self._cuda_memory, lambda: self.process_memory)
        self._terminate_lock = threading.Lock()
        self._terminate = TerminateHandler(self._terminate_requested, self._terminate_save_now,
                                           self._terminate_at_safe_point)
        self._terminate.install()
        if self._want_probes:
            self._start_probes()
        self.dispatch.start(self)  # each extension in order (a fault disables that event of that extension)
        self.hot.t0_s = self.phases.begin()
        self.hot.next_report_s = self.hot.t0_s + self._interval_s
        self.status = "running"
        self.phases.resume_train()
        if self._record is not None or self.text:
            self._heartbeat = Heartbeat(self, self._interval_s, self._say)
            self._heartbeat.start()

    def _start_probes(self) -> None:
        import importlib.util

        if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
            return
        from trainmeter.core.probes import TorchProbes

        probes = TorchProbes(self)
        self._probes = probes  # set first: a Ctrl-C inside start() still gets them removed
        try:
            probes.start()
        except Exception as exc:
            self.warn_once("torch-probes", f"torch probes disabled: {exc!r}")
            probes.stop()
            self._probes = None

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """End the run: final report, remove probes, write the passport.

        Each part runs once, in order, with Ctrl-C held back; the active-run
        slot is freed and patches and threads restored whatever happens. A
        Ctrl-C that arrived meanwhile is re-raised at the end, after cleanup.

        Raises:
            KeyboardInterrupt: Only a Ctrl-C the user pressed during finish.
        """
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

        interrupted = False
        done = self._finish_done
        try:
            if "status" not in done:
                done.add("status")
                self._finished = True
                self.status = status
                if error is not None:
                    self.error = f"{type(error).__name__}: {error}"
                if isinstance(error, SystemExit):
                    code = error.code
                    self.exit_code = code if isinstance(code, int) or code is None else str(code)[:200]
                self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            # a steady report's job still queued runs before the wings stop (docs/spec.md section 20; bounded)
            parts: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [("report-drain", self.worker.drain, ())]
            if self._heartbeat is not None:
                parts.append(("heartbeat-stop", self._heartbeat.stop, ()))
            if self._probes is not None:
                parts.append(("torch-probes-stop", self._probes.stop, ()))
            # before the final report: spans they close are in its snapshot
            parts += [(key, fn, ()) for key, fn in self.dispatch.stop_parts()]
            if self.phases.session_start_s is not None:
                parts.append(("open-phase", self._close_open_phase, ()))
                parts.append(("final-report", self._report, (True,)))
            if "record" in self._started:
                parts += [("passport", self._passport_on_worker, ()), ("log-close", self._record.close, ())]
            parts.append(("report-worker-close", self.worker.close, ()))  # drained by then: its thread ends
            for key, fn, args in parts:
                if key in done:
                    continue
                done.add(key)
                for _attempt in range(2):  # a part cut by a Ctrl-C runs once more, so the record is whole
                    try:
                        fn(*args)
                    except KeyboardInterrupt:
                        interrupted = True
                        continue
                    except Exception as exc:
                        self.warn_once(key, f"{key} failed and was disabled: {exc!r}")
                    break
        finally:
            if self._terminate is not None:
                self._terminate.remove()
            with slot._ACTIVE_LOCK:
                if slot._ACTIVE is self:
                    slot._ACTIVE = None
        if "closing" not in done and "record" in self._started:
            done.add("closing")
            if not getattr(self._record, "passport_written", True):
                slot._UNSAVED = self  # kept (bounded: MAX_PENDING points per series) until tm.save() or the next run
            try:
                self._say(self._record.closing_line(self))
            except Exception:
                pass
        return interrupted

    def _passport_on_worker(self) -> None:
        """Write the passport (and the replay's dashboard file) on the report worker while this thread waits.

        The run is over by then: probes, samplers and the heartbeat stopped, the final report made, so the
        worker reads a final state that only it touches meanwhile (docs/spec.md section 20, "Finish"). The wait
        is bounded by the worker's drain timeout; a worker that never took the job (stuck, or past the wait
        before it began) leaves it to this thread, so the passport is on disk before finish returns. A failure
        is raised here, as when it was written here. Ctrl-C is held back meanwhile (finish holds it).
        """
        if self.finish_imports is not None:
            self._guard("finish-imports", self.finish_imports)
        worker = self.worker
        claim = threading.Lock()  # whichever thread takes it writes: the worker, or this one after the wait
        failed: list[Exception] = []

        def job() -> None:
            if claim.acquire(blocking=False):
                try:
                    self._write_passport()
                except Exception as exc:
                    failed.append(exc)

        worker.submit("passport", job)
        worker.drain()
        if claim.acquire(blocking=False):  # the worker did not take it (stuck, disabled, or not yet)
            self._write_passport()
        if failed:
            raise failed[0]

    def retry_passport(self) -> bool:
        """Write the passport again after a disk fault at the end; returns whether it is on disk now. Never raises."""
        if self._record is None:
            return True
        with HeldInterrupts():
            self._guard("passport-retry", self._record.write_passport, self)
            self._guard("log-close", self._record.close)
        return bool(getattr(self._record, "passport_written", True))

    def _close_open_phase(self) -> None:
        """Credit a ``tm.phase`` still open at the end (an exception or Ctrl-C inside it, or never exited)."""
        if self._phase_depth:
            self._phase_depth = 0
            self.phases.finish_phase(self._phase_name, self._phase_started_s)

    def _terminate_requested(self) -> None:
        """A SIGTERM was noted (signal context or the watcher thread): the next step boundary is a safe point."""
        self.hot.next_report_s = float("-inf")

    def _terminate_at_safe_point(self) -> None:
        """Act on a noted SIGTERM on the training thread, outside any handler (docs/spec.md section 18).

        When the process is to end, the run is finished as ``terminated`` and the signal re-delivered
        with its default action (the process ends here); else a passport is saved and the run goes on.
        """
        handler = self._terminate
        if handler is None or not handler.pending or not self._terminate_lock.acquire(blocking=False):
            return
        try:
            if handler.ends:
                self._finish_parts("terminated", None)  # its end restores the handler and re-delivers the signal
                handler.redeliver()
            else:
                handler.pending = False
                self._on_terminate(False)
        finally:
            self._terminate_lock.release()

    def _terminate_save_now(self) -> None:
        """The watcher's save when no safe point came (a blocked main thread): the passport as the run stands.

        A helper thread of ours, abandoned past its deadline; nothing here is undone, the process ends next.
        """
        if self._record is None or "record" not in self._started or self._finished:
            return
        if not self._terminate_lock.acquire(blocking=False):
            return  # the training thread is finishing the run
        try:
            self.status = "terminated"
            self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self._record.write_passport(self)
            self._record.close()
        finally:
            self._terminate_lock.release()

    def _on_terminate(self, ends_process: bool) -> None:
        """SIGTERM: finish as ``terminated`` when the process is about to end; else save a passport and go on."""
        try:
            if ends_process:
                self._finish_parts("terminated", None)
                return
            self.warn_once("sigterm", f"SIGTERM at step {self.hot.steps}: the program's own handler ran and the run "
                                      "went on; a passport was saved at that point")
            if self._record is not None and "record" in self._started and not self._finished:
                status, ended_at = self.status, self.ended_at
                self.status = "terminated"
                self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
                try:
                    self._guard("passport", self._record.write_passport, self)
                finally:
                    self.status, self.ended_at = status, ended_at
        except BaseException:
            pass

