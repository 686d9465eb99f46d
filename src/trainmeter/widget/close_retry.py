"""A close retried: a publisher whose close never ran whole is closed after the next cell (docs/spec.md section 18;
IPython's ``post_run_cell``, host patch ``close-retry``). Main thread."""

from __future__ import annotations

import weakref
from contextlib import suppress
from typing import Any

from trainmeter.core import host_patches
from trainmeter.widget.facts import LIVE_STATUSES
from trainmeter.widget.host import ipython_shell

_WATCHED: weakref.WeakSet[Any] = weakref.WeakSet()
_REGISTERED: list[Any] = []  # the shell whose events hold our callback


def watch(publisher: Any) -> None:
    """Close ``publisher`` after a later cell if its own close did not complete. Never raises."""
    with suppress(Exception):  # without IPython events the close simply is not retried
        if not host_patches.allow("close-retry"):
            return
        _WATCHED.add(publisher)
        if _REGISTERED:
            return
        shell = ipython_shell()
        if shell is None:
            return
        shell.events.register("post_run_cell", _after_cell)
        _REGISTERED.append(shell)


def _after_cell(result: Any = None) -> None:
    for publisher in list(_WATCHED):
        if publisher.closed_whole:
            _WATCHED.discard(publisher)
            continue
        if getattr(publisher.monitor, "status", None) in LIVE_STATUSES:
            continue  # its run is still live (a run started by tm.monitor() across cells)
        _WATCHED.discard(publisher)
        with suppress(BaseException):  # a Ctrl-C now is the user's for this cell, which has ended
            publisher.close(retry=True)
    if not _WATCHED and _REGISTERED:
        unregister()


def unregister() -> None:
    """Take our callback off the shell's events (idempotent)."""
    while _REGISTERED:
        shell = _REGISTERED.pop()
        with suppress(Exception):  # already gone
            shell.events.unregister("post_run_cell", _after_cell)
