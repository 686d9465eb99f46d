"""Signals around trainmeter's own state changes (docs/spec.md section 18): Ctrl-C held back, parts of an end run
whole; SIGTERM noted by a handler that does no work, the run saved outside it, then the signal's own action. A forked
child gets the previous SIGTERM handler back (SIGTERM blocked across the fork); off the main thread nothing is
installed.
"""

from __future__ import annotations

import atexit
import functools
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from types import FrameType
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.faults import quietly
from trainmeter.core.threads import OurThread

_SIGNAL_ERRORS = (ValueError, OSError, TypeError, RuntimeError)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def swap_handler(signum: int, handler: Callable[[int, FrameType | None], None]) -> tuple[bool, Any]:
    """Install ``handler`` for ``signum`` (main thread, host patch ``signals``): ``(installed, previous handler)``."""
    if not _in_main_thread() or not host_patches.enabled("signals"):
        return False, None
    previous = None
    try:
        previous = signal.getsignal(signum)
        signal.signal(signum, handler)
        return True, previous
    except _SIGNAL_ERRORS:
        return False, None
    except BaseException:  # a Ctrl-C cut the install (tests/faults/test_ctrl_c_start.py): ours is not left in place
        if signal.getsignal(signum) is handler:
            put_back(signum, previous)
        raise


def put_back(signum: int, previous: Any, default: Any = signal.SIG_DFL) -> None:
    """Put the handler ``previous`` back for ``signum`` (``default`` where it was ``None``: not set from Python)."""
    with suppress(*_SIGNAL_ERRORS):
        signal.signal(signum, previous if previous is not None else default)


class HeldInterrupts:
    """A context that holds SIGINT back (``pending`` once one arrived); re-deliver it with :meth:`deliver`."""

    __slots__ = ("pending", "_frame", "_previous", "_installed")

    def __init__(self) -> None:
        self.pending = False
        self._frame: FrameType | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> HeldInterrupts:
        try:
            self._installed, self._previous = swap_handler(signal.SIGINT, self._hold)
            return self
        except BaseException:  # a KeyboardInterrupt that cut the entry (not a SIGINT: held) leaves ours installed
            self.__exit__()
            raise

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.pending = True
        self._frame = frame

    def __exit__(self, *exc: Any) -> None:
        if not self._installed:
            return
        try:
            put_back(signal.SIGINT, self._previous, signal.default_int_handler)
        except BaseException:  # a KeyboardInterrupt cut the restore: once more, as run_parts does
            put_back(signal.SIGINT, self._previous, signal.default_int_handler)
            raise
        finally:
            self._installed = False

    def deliver(self) -> None:
        """Hand a held SIGINT to the handler that was in place (no-op when none arrived); with the default handler
        (or one that is not a Python callable), raise KeyboardInterrupt."""
        if not self.pending:
            return
        self.pending = False
        previous = self._previous
        if callable(previous):
            previous(signal.SIGINT, self._frame)
        elif previous is not signal.SIG_IGN:
            raise KeyboardInterrupt


def run_parts(parts: Iterable[tuple[str, Callable[[], Any]]], warn: Callable[[str, Exception], None], *,
              needs_first: bool = False) -> bool:
    """Run each part once, once more if a ``KeyboardInterrupt`` cut it; whether one came. Another exception goes
    to ``warn(key, exc)`` and the next parts run, unless ``needs_first`` and the first never completed."""
    interrupted = False
    for index, (key, part) in enumerate(parts):
        done = False
        for _attempt in range(2):
            try:
                part()
                done = True
            except KeyboardInterrupt:
                interrupted = True
                continue
            except Exception as exc:
                quietly(warn, key, exc)  # a warning must not stop the parts
            break
        if index == 0 and needs_first and not done:
            break
    return interrupted


SAFE_POINT_WAIT_S = 1.0
SAVE_DEADLINE_S = 3.0
_STOP = b"\x00"  # never a signal number: the watcher's stop byte


class TerminateHandler:
    """SIGTERM noted (``pending``), the run saved outside the handler, then the signal's own behaviour: at the next
    step boundary, else by the watcher thread after ``SAFE_POINT_WAIT_S`` (docs/spec.md section 18).

    Args:
        on_request: Called in the signal handler and on the watcher thread; attribute writes only, never raises.
        save_now: Writes what can be written of the run, on a helper thread (abandoned after ``SAVE_DEADLINE_S``).
        at_exit: The safe point at interpreter exit (main thread).
        wakeup: Watch ``signal.set_wakeup_fd`` (tests of the handler alone pass ``False``).
    """

    def __init__(self, on_request: Callable[[], None], save_now: Callable[[], None] | None = None,
                 at_exit: Callable[[], None] | None = None, *, wakeup: bool = True) -> None:
        self._on_request = on_request
        self._save_now = save_now
        self._at_exit = at_exit
        self._wakeup = wakeup
        self._previous: Any = None
        self._installed = False
        self.pending = False
        self.ends = False
        self._fds: tuple[int, int] | None = None
        self._wakeup_set = False
        self._watcher: threading.Thread | None = None
        self._done = threading.Event()

    def install(self) -> bool:
        """Install in the main thread; returns whether it was installed."""
        global _INSTALLED
        installed, self._previous = swap_handler(signal.SIGTERM, self._handle)
        if not installed:
            return False
        self.ends = self._previous is not signal.SIG_IGN and not callable(self._previous)
        self._installed = True
        _INSTALLED = self
        _register_at_exit()
        if self.ends:
            self._start_watcher()
        return True

    def _start_watcher(self) -> None:
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
        except OSError:
            return
        self._fds = (r, w)
        if self._wakeup:
            with suppress(ValueError, OSError):
                old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
                if old == -1:
                    self._wakeup_set = True
                else:  # someone else's (an event loop): keep theirs; the Python handler tells the watcher
                    signal.set_wakeup_fd(old)
        watcher = self._watcher = OurThread(target=self._watch, name="trainmeter-sigterm")
        try:
            watcher.start()
        except Exception:  # no thread to be had (a thread limit): SIGTERM is noted without the watcher
            self._restore_wakeup()
            self._stop_watcher()

    def remove(self) -> None:
        """Restore the previous handler; a SIGTERM noted and not acted on is re-delivered. Idempotent; main thread."""
        global _INSTALLED
        if not self._installed or not _in_main_thread():
            return
        self._done.set()
        self._installed = False
        if _INSTALLED is self:
            _INSTALLED = None
        self._restore_wakeup()
        with suppress(*_SIGNAL_ERRORS):
            if signal.getsignal(signal.SIGTERM) == self._handle:
                put_back(signal.SIGTERM, self._previous)
        self._stop_watcher()
        if self.pending and self.ends:
            self.redeliver()

    def _restore_wakeup(self) -> None:
        if self._wakeup_set and self._fds is not None:
            self._wakeup_set = False
            with suppress(ValueError, OSError):
                current = signal.set_wakeup_fd(-1)
                if current not in (-1, self._fds[1]):
                    signal.set_wakeup_fd(current)  # replaced by someone since: theirs stays

    def _stop_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        fds, self._fds = self._fds, None
        if fds is None:
            return
        with suppress(OSError):
            os.write(fds[1], _STOP)
        # a watcher whose start failed or was cut (a Ctrl-C in Thread.start's wait for it) may not be started:
        # join would raise; one that runs reads the stop byte, or finds the descriptors gone
        if watcher is not None and watcher is not threading.current_thread() and watcher.is_alive():
            watcher.join(timeout=1.0)
        for fd in fds:
            with suppress(OSError):
                os.close(fd)

    def redeliver(self) -> None:
        """End the process by SIGTERM with its default action (main thread: at once; else through libc)."""
        self.pending = False
        if _in_main_thread():
            with suppress(ValueError, OSError):
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)
                return
        _die_by_sigterm()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # signal context: attribute writes and an os.write only (docs/spec.md section 18)
        previous = self._previous
        if previous is signal.SIG_IGN:
            return
        self.pending = True
        with suppress(BaseException):  # the signal's own behaviour must still happen
            self._on_request()
        if not self.ends:
            previous(signum, frame)
            return
        fds = self._fds
        if fds is not None:  # also with the wakeup descriptor: someone may have replaced it since (an event loop)
            with suppress(OSError):
                os.write(fds[1], bytes((signum,)))

    def _watch(self) -> None:
        fds = self._fds
        if fds is None:
            return
        r = fds[0]
        while True:
            try:
                select.select([r], [], [])
                data = os.read(r, 512)
            except OSError:
                return
            if not data or _STOP[0] in data:
                return
            if signal.SIGTERM in data:
                break
        self.pending = True
        quietly(self._on_request)
        if self._done.wait(SAFE_POINT_WAIT_S):
            return  # the training thread finished the run and re-delivered (or the run ended meanwhile)
        save = self._save_now
        if save is not None:
            helper = OurThread(target=_quiet, args=(save,), name="trainmeter-sigterm-save")
            helper.start()
            helper.join(SAVE_DEADLINE_S)
        if not self._done.is_set() or self.pending:
            _die_by_sigterm()


def _quiet(fn: Callable[[], None]) -> None:
    with suppress(BaseException):  # a helper thread of ours; the process ends next
        fn()


def _die_by_sigterm() -> None:
    """End the process by SIGTERM's default action from any thread (Python sets handlers in the main thread only)."""
    with suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signal.SIGTERM), None)  # SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
    os._exit(128 + int(signal.SIGTERM))


_INSTALLED: TerminateHandler | None = None


@functools.cache
def _register_at_exit() -> None:  # once per process
    atexit.register(_on_interpreter_exit)


def _on_interpreter_exit() -> None:
    """A SIGTERM noted but not yet acted on when the program ends: save at this safe point, then re-deliver."""
    handler = _INSTALLED
    if handler is None or not handler.pending or not handler.ends:
        return
    if handler._at_exit is not None:
        _quiet(handler._at_exit)
    if handler.pending:
        handler.redeliver()


_BLOCKED_AT_FORK = False


def _block_at_fork() -> None:
    """Before a fork: SIGTERM waits (blocked) until the child has its previous handler back (a worker terminated
    as it starts would else run our handler and write to our shared wakeup descriptor)."""
    global _BLOCKED_AT_FORK
    if _INSTALLED is None or not hasattr(signal, "pthread_sigmask"):
        return
    try:
        _BLOCKED_AT_FORK = signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (ValueError, OSError):
        _BLOCKED_AT_FORK = False


def _unblock_after_fork() -> None:
    global _BLOCKED_AT_FORK
    if _BLOCKED_AT_FORK:
        _BLOCKED_AT_FORK = False
        with suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one that came meanwhile is delivered now


def _reset_in_child() -> None:
    """A forked child never keeps our SIGTERM handler or wakeup descriptor: the previous ones come back."""
    global _INSTALLED
    handler, _INSTALLED = _INSTALLED, None
    if handler is not None:
        handler._installed = False
        handler._watcher = None
        handler.pending = False
        handler._restore_wakeup()
        put_back(signal.SIGTERM, handler._previous)
        fds, handler._fds = handler._fds, None
        for fd in fds or ():
            with suppress(OSError):
                os.close(fd)
    _unblock_after_fork()  # a SIGTERM sent meanwhile now has the previous (default) action


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_block_at_fork, after_in_parent=_unblock_after_fork, after_in_child=_reset_in_child)
