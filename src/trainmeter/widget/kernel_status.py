"""Keep the kernel's busy/idle status true while a run holds the main shell (docs/protocol.md section 4): after an
``idle`` published off the main thread (ipykernel 7), ``busy`` again for the running cell until the run ends. The
``status`` host patch (core/host_patches.py). Any thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from trainmeter.core import host_patches

ATTR = "_publish_status"
START_GRACE_S = 10.0  # from install to the run's start (the widget's comm opens first: its idles count too)


class StatusGuard:
    """The wrapper of one kernel's ``_publish_status`` (``original``), while ``active()``; ``parent``: the running
    cell's ``execute_request``. It removes itself at the first status after the run's end, or :data:`START_GRACE_S`
    after the install when the run never went live."""

    def __init__(self, kernel: Any, original: Callable[..., Any], active: Callable[[], bool],
                 parent: dict[str, Any] | None) -> None:
        self.kernel = kernel
        self.original = original
        self.active = active
        self.parent = parent
        self.seen_active = False
        self.installed_at = time.monotonic()

    def __call__(self, status: Any, channel: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = self.original(status, channel, *args, **kwargs)
        with suppress(Exception):  # the kernel's own status was published above
            if self.active():
                self.seen_active = True
            elif self.seen_active or time.monotonic() - self.installed_at > START_GRACE_S:
                self.remove()  # the run is over (or never started): the kernel's own statuses from here on
                return result
            if status == "idle" and self.parent and threading.current_thread() is not threading.main_thread():
                self.original("busy", "shell", parent=self.parent)
        return result

    def remove(self) -> None:
        """Give the kernel its own method back (idempotent, any thread)."""
        with suppress(Exception):
            if self.kernel.__dict__.get(ATTR) is self:
                del self.kernel.__dict__[ATTR]


def guard_of(kernel: Any) -> StatusGuard | None:
    """The guard installed on ``kernel``, if any."""
    found = getattr(kernel, "__dict__", {}).get(ATTR)
    return found if isinstance(found, StatusGuard) else None


def install(kernel: Any, active: Callable[[], bool]) -> StatusGuard | None:
    """Guard ``kernel``'s status for the run starting now on the main thread (idempotent: a guard already there
    takes the new run's parent); ``None`` when not installed. Never raises."""
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
