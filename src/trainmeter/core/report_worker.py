"""The report worker: one thread of ours that runs the wings' per-point report work off the training thread, in
submission order (docs/spec.md section 20, "Reports and the report worker"; section 19: around a fork).

At most ``MAX_JOBS`` jobs wait (then a submit waits up to ``STUCK_AFTER_S``); a job that raises disables its owner's
later jobs; ``threaded=False`` (a fake clock) runs each job at once. :meth:`submit`, :meth:`drain`, :meth:`close`:
any thread; jobs run on the worker thread one at a time.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable

from trainmeter.core.faults import quietly
from trainmeter.core.threads import OurThread

MAX_JOBS = 256
STUCK_AFTER_S = 10.0
DRAIN_TIMEOUT_S = 60.0
JOIN_S = 1.0  # a drained worker's thread, told to end: it only wakes
FOLD_EVERY_S = 0.2
MAX_FOLD_EVERY_S = 5.0
THREAD_NAME = "trainmeter-report-worker"
REPORT_JOB = "report"  # the owner of a steady report's own job: it runs every report_on_worker wing's on_report

Job = Callable[[], None]


def fold_every_s(interval_s: float) -> float:
    """The fold period of a run reporting every ``interval_s``: a quarter of it, within the two bounds."""
    return min(MAX_FOLD_EVERY_S, max(FOLD_EVERY_S, interval_s / 4))


class ReportWorker:
    """Runs submitted jobs in order on one daemon thread; ``on_fault(owner, exc)`` when a job raises or
    ``("report-worker", exc)`` when it is stuck; ``report_interval_s`` sets the fold period (:func:`fold_every_s`)."""

    def __init__(self, *, threaded: bool = True, on_fault: Callable[[str, BaseException], None] | None = None,
                 report_interval_s: float | None = None) -> None:
        self.threaded = threaded
        self._fold_every_s = FOLD_EVERY_S if report_interval_s is None else fold_every_s(report_interval_s)
        self._on_fault = on_fault
        self.wait_left_s: Callable[[], float] = lambda: DRAIN_TIMEOUT_S  # a wait's default bound (the run's end's)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._jobs: deque[tuple[str, Job]] = deque()
        self._running: tuple[str, str] | None = None  # (owner, "job" or "fold") running now; a fold is safe at a fork
        self._held_for_fork = False
        self._closed = False
        self._stuck = False
        self._thread: threading.Thread | None = None
        self.disabled: set[str] = set()
        self._folds: list[tuple[str, Job]] = []

    def every(self, owner: str, fold: Job) -> None:
        """Run ``fold`` (of wing ``owner``) while the worker idles, once its thread runs (never unthreaded); a fold
        reads what is final and publishes by replacing a reference."""
        if self.threaded:
            self._folds.append((owner, fold))

    def submit(self, owner: str, job: Job) -> None:
        """Queue ``job`` (of wing ``owner``); returns at once unless ``MAX_JOBS`` already wait."""
        if os.getpid() != self._pid:  # a forked child: the parent's thread and jobs are not here
            self._reset()
        if owner in self.disabled or self._stuck:
            return
        if not self.threaded or self._closed or threading.current_thread() is self._thread:
            self._run(owner, job)  # unthreaded, closed, or a job's own job: after every job before it already
            return
        with self._cond:
            if len(self._jobs) >= MAX_JOBS and not self._cond.wait_for(
                    lambda: len(self._jobs) < MAX_JOBS, STUCK_AFTER_S):
                self._declare_stuck()
                return
            self._jobs.append((owner, job))
            started = self._start()
            self._cond.notify_all()
            inline = () if started else tuple(self._jobs)
            if not started:
                self._jobs.clear()
        for queued in inline:  # no thread can start (the interpreter's shutdown): in order, on this thread
            self._run(*queued)

    def wake(self) -> None:
        """Start the thread for the folds (a report calls it; idempotent)."""
        if self._folds and self._thread is None and not self._closed and os.getpid() == self._pid:
            with self._cond:
                self._start()

    def _start(self) -> bool:
        """Start the thread if it is not running (caller holds the lock); ``False`` when none can start (at the
        interpreter's exit: jobs then run on the calling thread, docs/spec.md section 20)."""
        if self._thread is None:
            thread = self._thread = OurThread(target=self._loop, name=THREAD_NAME)
            try:
                thread.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown"
                self._thread, self.threaded = None, False
                return False
            except BaseException:  # a Ctrl-C cut the start: a thread that never began is no worker
                if not thread.began():
                    self._thread = None  # one beginning later sees it is not the worker and ends (_loop)
                raise
        return True

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for every job submitted so far; whether they ran within ``timeout_s`` (``None``: ``wait_left_s``)."""
        if self._thread is None or os.getpid() != self._pid or threading.current_thread() is self._thread:
            return True  # none, or a job asking: it runs after the ones before it already
        with self._cond:
            wait_s = self.wait_left_s() if timeout_s is None else timeout_s
            return self._cond.wait_for(lambda: not self._jobs and self._running is None, wait_s)

    def on_worker_thread(self) -> bool:
        """Whether the caller is the worker's thread (a job running). Any thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    accepting = property(lambda self: self.threaded and not (self._closed or self._stuck) and os.getpid() == self._pid,
                         doc="Whether a job submitted now would run later on the worker's thread. Any thread.")

    running = property(lambda self: self._running,
                       doc='``(owner, "job" or "fold")`` the worker\'s thread runs now, else ``None``. Any thread.')

    thread = property(lambda self: self._thread, doc="The worker's thread, while it runs.")

    def abandon(self) -> None:
        """Give up on the job under way (docs/spec.md section 20): the queued jobs run now in the caller's thread,
        later ones at once; the thread ends when that job returns. Any thread but the worker's."""
        with self._cond:
            jobs, self._jobs = list(self._jobs), deque()
            self._closed = True
            self._thread = None
            self._cond.notify_all()
        for owner, job in jobs:
            if owner not in self.disabled:
                self._run(owner, job)

    pending = property(lambda self: len(self._jobs) + (self._running is not None),
                       doc="Jobs waiting or running (0 once drained).")

    def close(self, timeout_s: float | None = None) -> None:
        """Run what is queued, then end the thread (``timeout_s`` as :meth:`drain`'s); later jobs run at once."""
        thread = self._thread
        drained = self.drain(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread() and os.getpid() == self._pid:
            thread.join(JOIN_S if drained else max(0.0, self.wait_left_s()))  # drained: it ends at once
        self._thread = None

    def hold_for_fork(self, wait_s: float) -> None:
        """Before a fork: wait up to ``wait_s`` for the running job, then hold the lock so no job begins."""
        if (self._thread is None or os.getpid() != self._pid or self._held_for_fork
                or not self._cond.acquire(timeout=wait_s)):
            return
        self._held_for_fork = True
        self._cond.wait_for(lambda: self._running is None, wait_s)

    def release_after_fork(self) -> None:
        """After a fork, in the parent: let the worker go on."""
        if self._held_for_fork:
            self._held_for_fork = False
            self._cond.release()

    def reset_in_child(self) -> str | None:
        """After a fork, in the child: a fresh worker of its own; the owner whose job was under way at the fork,
        else ``None`` (a fold under way tore nothing)."""
        running = self._running
        self._reset()
        return running[0] if running is not None and running[1] == "job" else None

    def _declare_stuck(self) -> None:
        """A full queue that did not move for ``STUCK_AFTER_S`` (caller holds the lock)."""
        self._stuck = True
        owners = sorted({owner for owner, _ in self._jobs})
        self._jobs.clear()
        self._cond.notify_all()
        quietly(self._on_fault, "report-worker", RuntimeError(
            f"the report worker made no progress for {STUCK_AFTER_S:.0f} s with {MAX_JOBS} jobs queued; "
            f"the report work of {', '.join(owners) or 'no wing'} stopped"))

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                if self._thread is not threading.current_thread():
                    return  # given up (abandon) or began after its start was given up (_start)
                if not cond.wait_for(lambda: self._jobs or self._closed, self._fold_every_s if self._folds else None):
                    job, self._running = None, ("?", "fold")  # idle for the fold period: the folds
                elif not self._jobs:
                    return  # closed and empty
                else:
                    owner, job = self._jobs.popleft()
                    self._running = (owner, "job")
            try:
                if job is None:  # the folds
                    for owner, fold in list(self._folds):
                        if owner not in self.disabled:
                            self._running = (owner, "fold")
                            self._run(owner, fold)
                elif owner not in self.disabled:
                    self._run(owner, job)
            except BaseException:  # a call the run's end gave up on returned (core/dispatch.py Abandoned): no more
                return
            finally:
                with cond:
                    self._running = None
                    cond.notify_all()

    def _run(self, owner: str, job: Job) -> None:
        try:
            job()
        except Exception as exc:  # a wing's fault disables that wing's jobs, never the worker or the loop
            self.disabled.add(owner)
            quietly(self._on_fault, owner, exc)
