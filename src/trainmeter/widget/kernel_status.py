"""Keep the kernel's busy/idle status true while a run holds the main shell (docs/protocol.md section 4).

ipykernel 7 publishes ``idle`` after every message it handles on any thread, which the status bar shows as "Idle"
for the rest of the run. :func:`install` wraps the kernel's ``_publish_status`` while a run started on the main
thread is live: after an ``idle`` from any thread but the main one, it publishes ``busy`` again with the running
cell's ``execute_request`` as parent. The wrapper removes itself at the first status after the run's end (or
:data:`START_GRACE_S` after the install when the run never went live); it is installed before the widget's comm
opens. The ``status`` host patch (core/host_patches.py; ``TRAINMETER_DISABLE=status`` leaves the kernel alone).
Any thread: the wrapper only reads two attributes and calls the kernel's own method.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from trainmeter.core import host_patches

ATTR = "_publish_status"
START_GRACE_S = 10.0  # from install to the run's start (the widget's comm opens first: its idles count too)


class StatusGuard:
    """The wrapper of one kernel's ``_publish_status``.

    Args:
        kernel: The ipykernel kernel.
        original: Its bound ``_publish_status`` (``(status, channel, parent=None)``).
        active: Whether the run is live now.
        parent: The running cell's ``execute_request`` (the main shell's parent at install).
    """

    def __init__(self, kernel: Any, original: Callable[..., Any], active: Callable[[], bool],
                 parent: dict[str, Any] | None) -> None:
        self.kernel = kernel
        self.original = original
        self.active = active
        self.parent = parent
        self.reasserted = 0
        self.seen_active = False
        self.installed_at = time.monotonic()

    def __call__(self, status: Any, channel: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = self.original(status, channel, *args, **kwargs)
        try:
            if self.active():
                self.seen_active = True
            elif self.seen_active or time.monotonic() - self.installed_at > START_GRACE_S:
                self.remove()  # the run is over (or never started): the kernel's own statuses from here on
                return result
            if status == "idle" and self.parent and threading.current_thread() is not threading.main_thread():
                self.original("busy", "shell", parent=self.parent)
                self.reasserted += 1
        except Exception:  # noqa: BLE001 - the kernel's own status was published above
            pass
        return result

    def remove(self) -> None:
        """Give the kernel its own method back (idempotent, any thread)."""
        try:
            if self.kernel.__dict__.get(ATTR) is self:
                del self.kernel.__dict__[ATTR]
        except Exception:  # noqa: BLE001
            pass


def guard_of(kernel: Any) -> StatusGuard | None:
    """The guard installed on ``kernel``, if any."""
    found = getattr(kernel, "__dict__", {}).get(ATTR)
    return found if isinstance(found, StatusGuard) else None


def install(kernel: Any, active: Callable[[], bool]) -> StatusGuard | None:
    """Guard ``kernel``'s status for the run starting now on the main thread; ``None`` when not installed.

    Call on the main thread at the run's start (the shell's parent then is the cell's ``execute_request``). Idempotent:
    a guard already there takes the new run's parent. Never raises.
    """
    try:
        if threading.current_thread() is not threading.main_thread():
            return None  # a run on another thread leaves the main shell free: its status is true as it is
        parent = kernel.get_parent("shell")
        if not isinstance(parent, dict) or (parent.get("header") or {}).get("msg_type") != "execute_request":
            return None
        existing = guard_of(kernel)
        if existing is not None:
            existing.active, existing.parent = active, parent
            existing.seen_active, existing.installed_at = False, time.monotonic()
            return existing
        if not host_patches.allow("status"):
            return None
        original = getattr(kernel, ATTR, None)
        if not callable(original):
            return None
        guard = StatusGuard(kernel, original, active, parent)
        kernel._publish_status = guard
        return guard
    except Exception:  # noqa: BLE001
        return None
