"""Fork safety: a forked child never writes to its parent's run; it becomes a rank of it (docs/spec.md section 19).

``os.register_at_fork`` handlers, installed once per process by the ranks extension: before, take the monitor's
series locks (bounded waits) and hold the report worker between jobs; after, in the parent, release them and
count the fork; after, in the child, re-home the inherited monitor (the core's ``rehome_in_child``, seated at its
first report by a :class:`LazyRankRecorder`). The child's run is finished by a ``multiprocessing`` finalizer or at
interpreter exit (what re-homing drops and keeps: docs/spec.md section 19, "fork").
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from trainmeter.core import monitor as monitor_module
from trainmeter.core.lifecycle import exit_status
from trainmeter.ranks import autostart
from trainmeter.record.recorder import RunRecorder

LOCK_WAIT_S = 0.5
CHILD_FIRST_REPORT_S = 1.0  # a child's first report (its seat, its steps on disk) comes this soon
THREAD_EXTENSIONS = ("gpu", "node")  # their sampler threads do not survive a fork; one per node anyway

_installed_pid = 0
_held: list[Any] = []
_forks = 0
_child_monitor: Any = None
_child_pid = 0


def forks_seen() -> int:
    """Forks made by this process while a run was monitored, since the process began (a run takes the difference)."""
    return _forks


def install() -> None:
    """Register the fork handlers once per process (idempotent)."""
    global _installed_pid
    if _installed_pid:
        return
    _installed_pid = os.getpid()
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)
    atexit.register(_finish_child, "completed")
    with contextlib.suppress(Exception):
        from multiprocessing import util

        util.register_after_fork(_mp_after_fork, _mp_after_fork)  # the key, weakly referenced: a long-lived object


def _before() -> None:
    m = monitor_module.active()
    if m is None:
        return
    with contextlib.suppress(Exception):
        for lock in m.locks():
            if lock.acquire(timeout=LOCK_WAIT_S):
                _held.append(lock)
        worker = m.open_worker
        if worker is not None:
            worker.hold_for_fork(LOCK_WAIT_S)


def _after_in_parent() -> None:
    global _forks
    m = monitor_module.active()
    with contextlib.suppress(Exception):
        if m is not None and m.open_worker is not None:
            m.open_worker.release_after_fork()
    while _held:
        with contextlib.suppress(Exception):
            _held.pop().release()
    if m is not None:
        _forks += 1


def _after_in_child() -> None:
    global _child_monitor, _child_pid, _forks
    _held.clear()  # the child's copies are replaced below, never released
    _forks = 0
    m = monitor_module.rehome_in_child(LazyRankRecorder, THREAD_EXTENSIONS, CHILD_FIRST_REPORT_S)
    if m is not None:
        _child_monitor, _child_pid = m, os.getpid()


class LazyRankRecorder(RunRecorder):
    """A child's record (forked, or autostarted): an unseated rank's, which takes its seat only at the first report
    after a step, so a process that never steps leaves no trace (:meth:`open` is deferred to then)."""

    def __init__(self) -> None:
        super().__init__()
        self.seated = False  # whether the run took its seat (wrote anything)

    def open(self, run: Any, started_at: str) -> Path | None:
        """Make nothing yet (the run's ``run_dir`` stays ``None``; its ``started_at`` is the run's)."""
        return None

    def _seated_now(self, run: Any) -> bool:
        if not self.seated and run.steps > 0:
            self.seated = True
            run.set_run_dir(super().open(run, run.started_at))
        return self.seated

    def write_interval(self, run: Any, elapsed_s: float, phases_s: dict[str, float], extra: dict[str, Any]) -> None:
        """Seat on the first report after a step, then write like the ordinary record."""
        if self._seated_now(run):
            super().write_interval(run, elapsed_s, phases_s, extra)

    def closing_line(self, run: Any) -> str:
        """The closing line, or an empty one when the run never took a seat."""
        return super().closing_line(run) if self.seated else ""

    def write_passport(self, run: Any) -> None:
        """The rank's passport, when it took a seat."""
        if self._seated_now(run):
            super().write_passport(run)


def _finish_child(status: str, error: BaseException | None = None) -> None:
    m = _child_monitor
    if m is None or _child_pid != os.getpid() or m.steps == 0:
        return  # a child that never stepped (a DataLoader worker) leaves no trace and does no work at exit
    m.finish(status, error)


def _mp_finalizer() -> None:
    # inside multiprocessing's bootstrap ``finally`` the exception on its way out is still sys.exc_info()'s
    status, error = exit_status(sys.exc_info()[1])
    _finish_child(status, error)
    autostart.finish_from_exit(status, error)


def _mp_after_fork(_key: Any = None) -> None:
    """In a ``multiprocessing`` child (fork or spawn), after its finalizer registry was cleared."""
    with contextlib.suppress(Exception):
        from multiprocessing import util

        util.Finalize(_mp_after_fork, _mp_finalizer, exitpriority=100)


def watch_exit() -> None:
    """In a ``multiprocessing`` child whose bootstrap already ran: finish its runs from a finalizer."""
    with contextlib.suppress(Exception):
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            _mp_after_fork()
