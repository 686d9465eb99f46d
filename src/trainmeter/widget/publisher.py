"""The widget publisher: the one thread that writes to a live run's widget.

``attach_widget(monitor)`` (called by ``%%trainmeter`` when the widget is shown)
displays a :class:`~trainmeter.widget.widget.TrainmeterWidget` at the top of the cell's
output with a display handle and starts a :class:`Publisher` thread. About four
times a second the thread reads new points with its own cursor
(``monitor.add_reader()``; advancing it lets the monitor trim), feeds one
:class:`~trainmeter.widget.decimate.Decimator` per series, and sends at most one frame
message (``append``, or ``snapshot`` after a ``hello`` or, at most every 2 s, after a
re-bucket: until then the view draws the finer old points and the coarser new ones), the
``state`` traitlet when it changed (at most every 0.5 s), and the ``history``
traitlet every 5 s (2 s in marimo). A sliding one-second window caps it all at 20 messages/s.
``close()`` at the cell's end sends the final state and history and replaces the
displayed widget view by the static dashboard (tables and chart images) that the
live front end re-mounts, so the saved notebook reads anywhere. Nothing here raises into the user's code.

Output routing: the thread runs inside a copy of the cell's ``contextvars``
context, so ipykernel 7 (which keeps the parent header in context variables)
tags its messages with the cell's request, as ipykernel 6 does by itself.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from trainmeter.widget.decimate import DEFAULT_BUDGET_POINTS, Decimator, share_budget
from trainmeter.widget.frame import SeriesColumns, encode_frame
from trainmeter.widget.live_rate import RecentFigures, RecentRate, RssReader
from trainmeter.widget.view_model import RECENT_SERIES, build_state, facts_from_monitor, report_points
from trainmeter.widget.x_axis import AXIS_BUDGET_POINTS, AXIS_EVERY_S, AXIS_TIME, AXIS_TOKENS

TICK_S = 0.25
STATE_INTERVAL_S = 0.5
HISTORY_INTERVAL_S = 5.0
MARIMO_HISTORY_INTERVAL_S = 2.0  # marimo answers no hello while the cell runs (Publisher.show)
REBUCKET_SNAPSHOT_INTERVAL_S = 2.0
MAX_MESSAGES_PER_S = 20
HISTORY_POINTS_TOTAL = 6000
LIVE_INTERVAL_S = 1.0  # recent rate, RSS and their chart point: once a second, whatever --interval is
MAX_FAILURES = 3
_FAR = 1 << 62

_LIVE: Publisher | None = None
_LAST: Publisher | None = None
_REGISTRY_LOCK = threading.Lock()


def _fresh_lock_in_child() -> None:
    """A forked child gets a lock of its own: a thread may have held the parent's at the fork (docs/spec.md)."""
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


class WidgetLike(Protocol):
    """What the publisher writes to (a TrainmeterWidget, or a recorder in tests)."""

    state: dict[str, Any]
    history: bytes

    def send(self, content: dict[str, Any], buffers: list[Any] | None = None) -> None:
        """Send a custom message with binary buffers."""
        ...


class MessageBudget:
    """At most ``per_s`` messages in any ``window_s`` window. Publisher thread only.

    Args:
        per_s: Messages allowed per window.
        window_s: Window length in seconds.
    """

    def __init__(self, per_s: int = MAX_MESSAGES_PER_S, window_s: float = 1.0) -> None:
        self.per_s = per_s
        self.window_s = window_s
        self._sent: deque[float] = deque()

    def allow(self, now_s: float) -> bool:
        """Whether one more message may go at ``now_s``; if so it is counted."""
        while self._sent and now_s - self._sent[0] >= self.window_s:
            self._sent.popleft()
        if len(self._sent) >= self.per_s:
            return False
        self._sent.append(now_s)
        return True


class Publisher:
    """Streams one monitor's series and state to one widget.

    Args:
        monitor: The run's :class:`~trainmeter.core.monitor.Monitor` (read-only here).
        widget: The widget to write (only this publisher writes it while it runs).
        clock: Seconds; defaults to the monitor's clock.
        tick_s: Seconds between ticks of the thread.
        budget_points: Points kept per series (decimated).
        history_points_total: Cap on points in a full frame across all series, shared
            by water-filling (keeps a saved notebook small: 6,000 points are 96 KB).
    """

    def __init__(self, monitor: Any, widget: WidgetLike, *, clock: Callable[[], float] | None = None,
                 tick_s: float = TICK_S, state_interval_s: float = STATE_INTERVAL_S,
                 history_interval_s: float = HISTORY_INTERVAL_S, max_messages_per_s: int = MAX_MESSAGES_PER_S,
                 budget_points: int = DEFAULT_BUDGET_POINTS, history_points_total: int = HISTORY_POINTS_TOTAL) -> None:
        self.monitor = monitor
        self.widget = widget
        self.clock = clock or monitor.clock
        self.tick_s = tick_s
        self.state_interval_s = state_interval_s
        self.history_interval_s = history_interval_s
        self.budget_points = budget_points
        self.history_points_total = history_points_total
        self.handles: list[Any] = []
        self.messages_sent = 0
        self.bytes_sent = 0
        self.decimators: dict[str, Decimator] = {}
        self._budget = MessageBudget(max_messages_per_s)
        self._cursor: dict[str, int] = monitor.add_reader()
        self._seq = 0
        self._reports_seen = 0
        self._rebucketed = False
        self._history_dirty = False
        self._last_state: dict[str, Any] | None = None
        self._last_state_s = -math.inf
        self._last_history_s = -math.inf
        self._last_snapshot_s = -math.inf
        self._snapshot = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._closed = False
        self.recent: RecentFigures | None = None
        self._recent = RecentRate()
        self._rss = RssReader()
        self._last_live_s = -math.inf
        self._tokens_total = 0
        self._axis_t_s = -math.inf
        self.x_head: tuple[int, int, float] | None = None
        self.restore_router: Any = None  # widget/restore_route.py's router, when installed
        self._restores_at_start = 0

    # -- thread ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether the thread runs (a ``hello`` will be answered by it)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> Publisher:
        """Start the thread in a copy of the caller's context (call from the cell)."""
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop,), name="trainmeter-publisher",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
                self._failures = 0
            except Exception as exc:
                self._failures += 1
                if self._failures >= MAX_FAILURES:
                    self._disable(exc)
                    return

    def _disable(self, exc: BaseException) -> None:
        self._stop.set()
        for name in list(self._cursor):
            self._cursor[name] = _FAR
        for series in list(self.monitor.series):
            self._cursor[series] = _FAR
        try:
            self.monitor.text = True
            self.monitor.warn_once("widget-publisher", f"live widget stopped updating: {exc!r}; text lines resume")
        except Exception:
            pass

    def request_snapshot(self) -> None:
        """Ask for a ``snapshot`` message on the next tick. Any thread."""
        self._snapshot.set()

    # -- one tick -----------------------------------------------------------------------------
    def tick(self, now_s: float | None = None) -> int:
        """Read new points and send what is due; returns the messages sent. Publisher thread."""
        now = self.clock() if now_s is None else now_s
        sent = 0
        if self._feed():
            self._history_dirty = True
        if now - self._last_live_s >= LIVE_INTERVAL_S:
            self._last_live_s = now
            if self._sample_recent():
                self._history_dirty = True
        if self._history_dirty and now - self._last_history_s >= self.history_interval_s:
            if self._budget.allow(now):
                self._set_history(self._full_frame(include_open=False))
                self._last_history_s = now
                self._history_dirty = self._rebucketed = False
                self._snapshot.clear()  # the new history replaces every view's store
                sent += 1
        elif self._snapshot.is_set() or (
                self._rebucketed and now - self._last_snapshot_s >= REBUCKET_SNAPSHOT_INTERVAL_S):
            if self._budget.allow(now):
                self._snapshot.clear()
                self._rebucketed = False
                frame = self._full_frame(include_open=False)
                self._send({"kind": "snapshot", "seq": self._seq}, frame)
                self._last_snapshot_s = now
                sent += 1
        elif any(d.pending for d in self.decimators.values()) and self._budget.allow(now):
            frame = self._append_frame()
            self._send({"kind": "append", "seq": self._seq}, frame)
            sent += 1
        if now - self._last_state_s >= self.state_interval_s:
            state = build_state(facts_from_monitor(self.monitor, recent=self.recent, x_head=self.x_head))
            if state != self._last_state and self._budget.allow(now):
                self._set_state(state)
                self._last_state_s = now
                sent += 1
        return sent

    def _feed(self) -> bool:
        """Move new points from the monitor into the decimators; returns whether any came."""
        m = self.monitor
        fresh = False
        for name, series in list(m.series.items()):
            end, steps, times, values = series.read(self._cursor.get(name, 0))
            self._cursor[name] = end
            if values:
                xs = steps if series.x_kind == "step" else times
                fresh |= self._extend(name, series.x_kind, xs, values)
        step_series = m.step_series
        end, steps, times, tokens = step_series.read(self._cursor.get(step_series.name, 0))
        self._cursor[step_series.name] = end  # not drawn: read for the recent rate, then let the monitor trim it
        self._recent.extend(times, tokens)
        if steps and times:  # the x mappings (widget/x_axis.py): the head always, a point once a second
            self._tokens_total += int(sum(tokens))
            self.x_head = (steps[-1], self._tokens_total, float(times[-1]))
            if float(times[-1]) - self._axis_t_s >= AXIS_EVERY_S:
                self._axis_t_s = float(times[-1])
                self._extend(AXIS_TOKENS, "step", [steps[-1]], [float(self._tokens_total)], AXIS_BUDGET_POINTS)
                self._extend(AXIS_TIME, "step", [steps[-1]], [float(times[-1])], AXIS_BUDGET_POINTS)
        reports = m.reports
        if reports != self._reports_seen:
            self._reports_seen = reports
            session = m.session
            t_s = session.elapsed_s if session is not None else m.elapsed_s()
            for name, value in report_points(m.interval, session, m.memory).items():
                if name not in m.series:
                    fresh |= self._extend(name, "time", [t_s], [value])
        return fresh

    def _sample_recent(self) -> bool:
        """Take the once-a-second figures (recent rate, RSS); returns whether a chart point was added."""
        previous = self.recent
        self.recent = self._recent.figures(rss_bytes=self._rss.read())
        if self.recent is None or (previous is not None and self.recent.t_s <= previous.t_s):
            return False
        return self._extend(RECENT_SERIES, "time", [self.recent.t_s], [self.recent.tokens_per_s])

    def _extend(self, name: str, x_kind: str, xs: list[Any], ys: list[float], budget_points: int | None = None
                ) -> bool:
        d = self.decimators.get(name)
        if d is None:
            d = self.decimators[name] = Decimator(name, x_kind, budget_points=budget_points or self.budget_points)
        if d.extend(xs, ys):
            self._rebucketed = True
        return True

    # -- frames and sends ------------------------------------------------------------------------
    def series_columns(self, *, include_open: bool, max_points: int | None = None) -> list[SeriesColumns]:
        """Every series' decimated history (for frames and the HTML snapshot)."""
        decimators = list(self.decimators.values())
        # each series' JSON header entry (name, kind, length) costs about three points of 16 bytes: keep the frame in budget
        total = max(2 * len(decimators), self.history_points_total - 3 * len(decimators))
        caps = share_budget({d.name: d.points for d in decimators}, total, self.budget_points)
        out = []
        for d in decimators:
            xs, ys = d.columns(include_open=include_open, max_points=max_points or caps[d.name])
            out.append(SeriesColumns(name=d.name, x_kind=d.x_kind, xs=xs, ys=ys))  # type: ignore[arg-type]
        return out

    def _full_frame(self, *, include_open: bool) -> bytes:
        columns = self.series_columns(include_open=include_open)
        for d in self.decimators.values():
            d.mark_all_taken()
        self._seq += 1
        return encode_frame(self._seq, columns)

    def _append_frame(self) -> bytes:
        columns = []
        for d in self.decimators.values():
            if d.pending:
                xs, ys = d.take_new()
                columns.append(SeriesColumns(name=d.name, x_kind=d.x_kind, xs=xs, ys=ys))  # type: ignore[arg-type]
        self._seq += 1
        return encode_frame(self._seq, columns)

    def _send(self, content: dict[str, Any], frame: bytes) -> None:
        self.widget.send(content, buffers=[frame])
        self.messages_sent += 1
        self.bytes_sent += len(frame) + len(json.dumps(content))

    def _set_state(self, state: dict[str, Any]) -> None:
        self.widget.state = state
        self._last_state = state
        self.messages_sent += 1
        self.bytes_sent += len(json.dumps(state))

    def _set_history(self, frame: bytes) -> None:
        self.widget.history = frame
        self.messages_sent += 1
        self.bytes_sent += len(frame)

    # -- display and the end -----------------------------------------------------------------------
    def show(self) -> Any:
        """Display the widget (one more view) with a display handle; returns the handle.

        In marimo the widget object goes into the cell's output (no handle: it stays the live view), and
        the ``history`` traitlet is sent every :data:`MARIMO_HISTORY_INTERVAL_S`: marimo's kernel reads
        the front end's messages only between cells, so ``hello`` is not answered while the cell trains and
        the history is the view's only catch-up for the appends it missed while its front end loaded.
        """
        from trainmeter.widget.host import in_marimo, show_in_marimo

        if in_marimo():
            self.history_interval_s = min(self.history_interval_s, MARIMO_HISTORY_INTERVAL_S)
            show_in_marimo(self.widget)
            return None
        from IPython.display import display

        data, metadata = _bundle(self.widget)
        handle = display(data, metadata=metadata, raw=True, display_id=True)
        if handle is not None:
            self.handles.append(handle)
        return handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (it writes the final state and ``dashboard.json``). Any thread."""
        return self._closed

    def close(self) -> None:
        """Stop the thread; send the final state and history; add the HTML snapshot. Never raises."""
        global _LIVE
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        try:
            self._feed()
            state = build_state(facts_from_monitor(self.monitor))
            self._set_state(state)
            save_dashboard(getattr(self.monitor, "run_dir", None), state)
            self._set_history(self._full_frame(include_open=True))
            attach = getattr(self.widget, "attach", None)
            if attach is not None:
                attach(None)  # from now on the widget answers hello from its history
            bundle = self._finish_displays(state)
            if bundle is not None and self.restored_during_run():
                self.widget.send({"kind": "final", "data": bundle})  # a reloaded page's output (reattach.ts)
        except Exception as exc:
            try:
                self.monitor.warn_once("widget-close", f"the widget's final update failed: {exc!r}")
            except Exception:
                pass
        finally:
            with _REGISTRY_LOCK:
                if _LIVE is self:
                    _LIVE = None
            uninstall = getattr(self.restore_router, "uninstall", None)  # no run live: the kernel's own routing
            if uninstall is not None:
                try:
                    uninstall()
                except Exception:
                    pass

    def restored_during_run(self) -> bool:
        """Whether a page restored this kernel's widgets while the run was live (widget/restore_route.py)."""
        return self.restores_seen() > self._restores_at_start

    def restores_seen(self) -> int:
        """Restore requests the kernel's router diverted so far (0 without one)."""
        router = self.restore_router
        return 0 if router is None else int(router.diverted.get("kernel_info_request", 0))

    def _finish_displays(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Replace every live view by the static dashboard, which the live front end re-mounts.

        The final bundle has no widget-view mimetype: a notebook saved from here on
        reopens without a kernel and without "model not found" (JupyterLab prefers
        the widget view whenever it is in the bundle, and shows that error when its
        model is gone). While this kernel lives, the widget's front end draws the
        interactive dashboard in place of the HTML (``data-tm-mount``).
        """
        if not self.handles:
            return None
        from trainmeter.widget.snapshot import snapshot_bundle

        data = snapshot_bundle(state, self.series_columns(include_open=True, max_points=None),
                               mount_key=getattr(self.widget, "store_key", None))
        for handle in self.handles:
            handle.update(data, raw=True)
        return data


DASHBOARD_FILE = "dashboard.json"


def save_dashboard(run_dir: Any, state: dict[str, Any]) -> None:
    """Write the final ``state`` to ``run_dir/dashboard.json``, so ``tm.display(run)`` replays every panel.

    The extensions' panels, charts and tiles (node, GPU, time split, compute) are
    built live and are not all in the passport. A few KB; a failure only loses the replay's extras.
    """
    if run_dir is None:
        return
    try:
        from pathlib import Path

        (Path(run_dir) / DASHBOARD_FILE).write_text(json.dumps(state, separators=(",", ":")), encoding="utf-8")
    except Exception:
        pass


def _bundle(widget: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The widget's mimebundle as ``(data, metadata)`` (anywidget returns a tuple)."""
    bundle = widget._repr_mimebundle_()
    if isinstance(bundle, tuple):
        data, metadata = bundle
    else:
        data, metadata = bundle, {}
    return dict(data or {}), dict(metadata or {})


def attach_widget(monitor: Any) -> Publisher:
    """Show a live widget for ``monitor`` at the top of the cell's output and start its publisher.

    Called by ``%%trainmeter`` before the cell's code runs; the returned sink's
    ``close()`` must run at the cell's end (whatever happened).

    Raises:
        ImportError: Without anywidget/IPython (the caller falls back to the text line).
    """
    global _LIVE, _LAST
    from trainmeter.widget.host import in_marimo
    from trainmeter.widget.widget import TrainmeterWidget

    with _REGISTRY_LOCK:
        previous = _LAST
    if previous is not None and previous.closed and previous is not _LIVE and not in_marimo():
        # its saved output keeps the static snapshot; the kernel keeps no comm (in marimo the finished
        # widget is still another cell's live view)
        _close_comms(previous.widget)
    widget = TrainmeterWidget(state=build_state(facts_from_monitor(monitor)))
    publisher = Publisher(monitor, widget)
    widget.attach(publisher)
    widget.output_ref = {"model_id": getattr(widget, "model_id", None), "cell_id": _cell_id()}
    publisher.restore_router = _route_restores(widget)
    publisher._restores_at_start = publisher.restores_seen()
    publisher.show()
    publisher.start()
    with _REGISTRY_LOCK:
        _LIVE = _LAST = publisher
    return publisher


def _cell_id() -> str | None:
    """JupyterLab's id of the running cell (``metadata.cellId`` of the execute request), else ``None``."""
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else None
        cell_id = ((parent or {}).get("metadata") or {}).get("cellId")
        return cell_id if isinstance(cell_id, str) and cell_id else None
    except Exception:
        return None


def _live_running() -> bool:
    with _REGISTRY_LOCK:
        live = _LIVE
    return live is not None and live.running


def _route_restores(widget: Any) -> Any:
    """Let a page reloaded during the run restore this widget (widget/restore_route.py); the router or ``None``.

    Never raises.
    """
    try:
        from IPython import get_ipython

        from trainmeter.widget.restore_route import install

        kernel = getattr(get_ipython(), "kernel", None)
        if kernel is None:
            return None
        router = install(kernel, _live_running)
        if router is not None:
            router.add_comm(getattr(getattr(widget, "comm", None), "comm_id", None))
        return router
    except Exception:
        return None


def _close_comms(widget: Any) -> None:
    """Close a finished widget's comms: its layout's and its own (ipywidgets keeps both open otherwise)."""
    for w in (getattr(widget, "layout", None), widget):
        close = getattr(w, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass


def live_publisher() -> Publisher | None:
    """The publisher of the run in progress, else of the last widget run in this kernel."""
    with _REGISTRY_LOCK:
        return _LIVE or _LAST
