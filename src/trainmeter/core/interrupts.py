"""Signals around trainmeter's own state changes: Ctrl-C held back, SIGTERM saved.

- :class:`HeldInterrupts` replaces the SIGINT handler (main thread only) by one
  that only remembers the signal, so starting or finishing a run (taking and
  freeing the active-run slot, installing and restoring patches, starting and
  joining threads, writing the passport) is never cut in half. On exit the
  previous handler is restored; :meth:`HeldInterrupts.deliver` then hands a
  held Ctrl-C to it (the default one raises ``KeyboardInterrupt``).
- :class:`TerminateHandler` saves the run on SIGTERM, restores the previous
  handler and re-delivers the signal, so the process still ends the way it
  would have without trainmeter.

Off the main thread, both do nothing (Python only runs handlers there).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from trainmeter.core import host_patches


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class HeldInterrupts:
    """A context that holds SIGINT back; re-deliver it with :meth:`deliver`.

    Attributes:
        pending: ``True`` once a SIGINT arrived while held.
    """

    __slots__ = ("pending", "_frame", "_previous", "_installed")

    def __init__(self) -> None:
        self.pending = False
        self._frame: FrameType | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> HeldInterrupts:
        if _in_main_thread() and host_patches.enabled("signals"):
            try:
                previous = signal.getsignal(signal.SIGINT)
                signal.signal(signal.SIGINT, self._hold)
            except (ValueError, OSError, TypeError, RuntimeError):
                return self
            self._previous = previous
            self._installed = True
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.pending = True
        self._frame = frame

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            self._installed = False
            try:
                signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
            except (ValueError, OSError, TypeError, RuntimeError):
                pass

    def deliver(self) -> None:
        """Hand a held SIGINT to the handler that was in place (no-op when none arrived).

        Raises:
            KeyboardInterrupt: From the default handler (or when the previous
                handler was not a Python callable).
        """
        if not self.pending:
            return
        self.pending = False
        previous = self._previous
        if previous is signal.SIG_IGN:
            return
        if callable(previous):
            previous(signal.SIGINT, self._frame)
            return
        raise KeyboardInterrupt


class TerminateHandler:
    """Save the run on SIGTERM, then behave as the previous handler would.

    - Default action (the process ends): ``on_terminate(True)`` finishes the run,
      then the signal is re-delivered with the default action.
    - A Python handler (a framework's graceful stop): ``on_terminate(False)``
      saves the passport as it stands, the handler runs, and the run goes on
      (it is finished as usual when the program's own stop comes through).
    - Ignored (``SIG_IGN``): nothing happens, as without trainmeter.

    Args:
        on_terminate: Called with whether the process is about to end; must not raise.
    """

    def __init__(self, on_terminate: Callable[[bool], None]) -> None:
        self._on_terminate = on_terminate
        self._previous: Any = None
        self._installed = False

    def install(self) -> bool:
        """Install in the main thread; returns whether it was installed."""
        if not _in_main_thread() or not host_patches.enabled("signals"):
            return False
        try:
            previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._handle)
        except (ValueError, OSError, TypeError, RuntimeError):
            return False
        self._previous = previous
        self._installed = True
        return True

    def remove(self) -> None:
        """Restore the previous handler if ours is still installed. Idempotent; main thread."""
        if not self._installed or not _in_main_thread():
            return
        self._installed = False
        try:
            if signal.getsignal(signal.SIGTERM) == self._handle:
                signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
        except (ValueError, OSError, TypeError, RuntimeError):
            pass

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous
        if previous is signal.SIG_IGN:
            return
        ends = not callable(previous)
        try:
            self._on_terminate(ends)
        except BaseException:  # noqa: S110 - the signal's own behaviour must still happen
            pass
        if not ends:
            previous(signum, frame)
            return
        self.remove()
        # SIG_DFL (or a handler set from C): deliver again with the default action (ends the process)
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
