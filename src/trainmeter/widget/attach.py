"""Showing a run's live widget: ``attach_widget``, the kernel's registry of publishers (live and last; one lock), and a
close retried: a publisher whose close never ran whole is closed after the next cell (docs/spec.md section 18;
IPython's ``post_run_cell``, host patch ``close-retry``; main thread)."""

from __future__ import annotations

import threading
import weakref
from contextlib import suppress
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.fork_locks import fresh_in_child
from trainmeter.widget import restore_route
from trainmeter.widget.facts import LIVE_STATUSES
from trainmeter.widget.host import in_marimo, ipython_shell
from trainmeter.widget.publisher import Publisher
from trainmeter.widget.view_model import build_state, facts_from_monitor

_LAST: Publisher | None = None  # the kernel's last widget run: live while its publisher runs
_REGISTRY_LOCK = threading.Lock()
_WATCHED: weakref.WeakSet[Any] = weakref.WeakSet()  # publishers whose close is retried after a cell
_REGISTERED: list[Any] = []  # the shell whose events hold our callback

fresh_in_child(globals(), "_REGISTRY_LOCK")  # a forked child makes its own (core/fork_locks.py)


def attach_widget(monitor: Any) -> Publisher:
    """Show a live widget for ``monitor`` at the top of the cell's output and start its publisher, whose ``close()``
    must run at the cell's end; ``ImportError`` without anywidget/IPython."""
    global _LAST
    from trainmeter.widget.widget import TrainmeterWidget

    previous = live_publisher()
    if previous is not None and previous.closed and not in_marimo():
        # its saved output keeps the static snapshot; the kernel keeps no comm (in marimo the finished
        # widget is still another cell's live view); its layout's comm too (ipywidgets keeps both open otherwise)
        for w in (getattr(previous.widget, "layout", None), previous.widget):
            with suppress(Exception):  # None (no layout) has no close
                w.close()
    kernel = _kernel()
    if kernel is not None:  # Busy for the whole run, from before the widget's comm opens (the front end answers it)
        restore_route.guard_status(kernel, _live_running)  # never raises
    widget = TrainmeterWidget(state=build_state(facts_from_monitor(monitor)))
    publisher = Publisher(monitor, widget)
    widget.attach(publisher)
    widget.output_ref = {"model_id": getattr(widget, "model_id", None), "cell_id": _request_text("metadata", "cellId"),
                         "source": _request_text("content", "code")}
    router = restore_route.install(kernel, _live_running) if kernel is not None else None  # never raises
    if router is not None:  # a page reloaded during the run restores this widget
        router.add_comm(getattr(getattr(widget, "comm", None), "comm_id", None))
    publisher.use_restore_router(router)
    publisher.show()
    publisher.start()
    with _REGISTRY_LOCK:
        _LAST = publisher
    return publisher


MAX_SOURCE_CHARS = 20_000  # a longer cell is found by its id alone


def _kernel() -> Any:
    return getattr(ipython_shell(), "kernel", None)


def _request_text(part: str, key: str) -> str | None:
    """``part.key`` of the running cell's execute request when a text of 1 to :data:`MAX_SOURCE_CHARS` characters:
    the cell's id (``metadata.cellId``), its code (how the front end finds a reloaded notebook's cell that had no id,
    js/src/reattach.ts); else ``None``."""
    try:
        kernel = _kernel()
        parent = kernel.get_parent("shell") if kernel is not None else None
        value = ((parent or {}).get(part) or {}).get(key)
    except Exception:
        return None
    return value if isinstance(value, str) and 0 < len(value) <= MAX_SOURCE_CHARS else None


def _live_running() -> bool:
    return getattr(live_publisher(), "running", False)


def live_publisher() -> Publisher | None:
    """The publisher of the run in progress, else of the last widget run in this kernel."""
    with _REGISTRY_LOCK:
        return _LAST


def watch_close(publisher: Any) -> None:
    """Close ``publisher`` after a later cell if its own close did not complete. Never raises."""
    with suppress(Exception):  # without IPython events the close simply is not retried
        if host_patches.allow("close-retry"):
            _WATCHED.add(publisher)
            shell = None if _REGISTERED else ipython_shell()
            if shell is not None:
                shell.events.register("post_run_cell", _after_cell)
                _REGISTERED.append(shell)


def _after_cell(result: Any = None) -> None:
    for publisher in list(_WATCHED):  # one still live (a run started by tm.monitor() across cells) stays watched
        if publisher.closed_whole or getattr(publisher.monitor, "status", None) not in LIVE_STATUSES:
            _WATCHED.discard(publisher)
            with suppress(BaseException):  # a Ctrl-C now is the user's for this cell, which has ended
                publisher.close(retry=True)  # returns at once when the close was whole
    while not _WATCHED and _REGISTERED:  # our callback off the shell's events
        with suppress(Exception):  # already gone
            _REGISTERED.pop().events.unregister("post_run_cell", _after_cell)
