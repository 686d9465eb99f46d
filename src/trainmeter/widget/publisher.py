"""The widget publisher: the one thread that writes to a live run's widget (docs/protocol.md section 2).

What it sends and when: docs/protocol.md section 2, "What goes when"; its close: section 4. Nothing here raises into
the user's code. The thread runs in a copy of the cell's ``contextvars`` context, so ipykernel 7 (which keeps the
parent header in context variables) tags its messages with the cell's request, as ipykernel 6 does by itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmeter.core.decimate import DEFAULT_BUDGET_POINTS
from trainmeter.core.interrupts import HeldInterrupts, run_parts
from trainmeter.core.threads import OurThread
from trainmeter.widget.feed import SeriesFeed, shown_series
from trainmeter.widget.host import in_marimo, show_in_marimo
from trainmeter.widget.view_model import build_state, facts_from_monitor, save_dashboard

TICK_S = 0.5
STATE_INTERVAL_S = 1.0  # with the once-a-second live figures: a build costs ~1.5 ms (docs/spec.md section 20, threads)
MARIMO_KEYFRAME_S = (2.0, 32.0)  # marimo answers no hello while the cell runs (Publisher.show): first, longest
MAX_MESSAGES_PER_S = 20
LIVE_INTERVAL_S = 1.0  # recent rate, RSS and their chart point: once a second, whatever --interval is
MAX_FAILURES = 3


class MessageBudget:
    """At most ``per_s`` (>= 1) messages in any ``window_s`` seconds. Publisher thread only."""

    def __init__(self, per_s: int = MAX_MESSAGES_PER_S, window_s: float = 1.0) -> None:
        self.window_s = window_s
        self._sent: deque[float] = deque(maxlen=per_s)  # the last per_s messages' times

    def allow(self, now_s: float) -> bool:
        """Whether one more message may go at ``now_s``; if so it is counted."""
        if len(self._sent) == self._sent.maxlen and now_s - self._sent[0] < self.window_s:
            return False
        self._sent.append(now_s)
        return True


Op = list[Any]  # [path] (delete) or [path, value] (set)


def diff(old: Any, new: Any) -> list[Op]:
    """State patches (docs/protocol.md section 2): the operations that turn ``old`` into ``new`` (both JSON-like;
    ``[]`` when equal); a bool that becomes a number is sent; js/src/statestore.ts applies them (tests/widget/
    test_patch.py ``apply``: the same rule). Pure."""
    ops: list[Op] = []
    _diff(old, new, [], ops)
    return ops


def _diff(a: Any, b: Any, path: list[str | int], ops: list[Op]) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if a == b:
            return
        kept_a = [k for k in a if k in b]
        kept_b = [k for k in b if k in a]
        added = [k for k in b if k not in a]
        if kept_a != kept_b or (added and list(b)[-len(added):] != added):  # the order changed: set whole
            ops.append([path, b])
            return
        ops.extend([[*path, k]] for k in a if k not in b)
        for k, v in b.items():
            if k in a:
                _diff(a[k], v, [*path, k], ops)
            else:
                ops.append([[*path, k], v])
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        if a == b:
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, [*path, i], ops)
    elif a != b or isinstance(a, bool) != isinstance(b, bool):  # True == 1 in Python, not in JSON
        ops.append([path, b])


class Revisions:
    """The state a front end holds, numbered from ``start``'s ``rev`` (else 0): each new state is sent as a patch of
    the last (docs/protocol.md). ``full``: the last state noted, whole, with its ``rev`` (replaced, never mutated:
    any thread may read it)."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.last = dict(start)
        self.rev = int(self.last.get("rev") or 0)
        self.full: dict[str, Any] | None = None

    def note(self, state: dict[str, Any]) -> list[Op]:
        """Take ``state`` as the front end's next one; returns the patch from the last (``[]``: unchanged)."""
        ops = diff(self.last, state)
        if ops or self.full is None:
            self.rev += bool(ops)
            self.last = state
            self.full = {**state, "rev": self.rev}
        return ops


class Publisher:
    """Streams one monitor's series and state to one widget.

    Args:
        monitor: The run's :class:`~trainmeter.core.context.RunContext`.
        widget: The widget to write (a TrainmeterWidget, or a recorder in tests: ``state``, ``history``, ``send``;
            only this publisher writes it while it runs).
        clock: Seconds; defaults to the monitor's clock.
        tick_s: Seconds between ticks of the thread.
        state_interval_s: Seconds between two states sent.
        budget_points: Points kept per series (decimated); a full frame holds at most ``HISTORY_POINTS_TOTAL``
            across all series, shared by water-filling (a saved notebook stays small: 192 KB).

    ``keyframes``: ``(first, longest)`` seconds between keyframes (the ``state`` and ``history`` traitlets set whole;
    the interval doubles after each), set by :meth:`show` in marimo; ``None`` in Jupyter (a new page says ``hello``).
    """

    def __init__(self, monitor: Any, widget: Any, *, clock: Callable[[], float] | None = None,
                 tick_s: float = TICK_S, state_interval_s: float = STATE_INTERVAL_S,
                 budget_points: int = DEFAULT_BUDGET_POINTS) -> None:
        self.monitor = monitor
        self.widget = widget
        self.clock = clock or monitor.clock
        self.tick_s = tick_s
        self.state_interval_s = state_interval_s
        self.keyframes: tuple[float, float] | None = None
        self.feed = SeriesFeed(monitor, budget_points=budget_points)
        self.handles: list[Any] = []
        self.bytes_sent = 0
        self._budget = MessageBudget()
        self.states = Revisions(getattr(widget, "state", None) or {})  # what the front end holds, numbered
        self._last_state_s = self._next_keyframe_s = self._last_live_s = -math.inf
        self._keyframe_gap_s = MARIMO_KEYFRAME_S[0]  # read once show() set keyframes
        self._snapshot = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self.closed = False  # close() ran (it writes the final state and dashboard.json); any thread reads it
        self.closed_whole = False  # every part of the close ran (widget/attach.py retries one that did not)
        self.restore_router: Any = None  # widget/restore_route.py's router, when installed
        self._restores_at_start = 0

    @property
    def live_state(self) -> dict[str, Any] | None:
        """The newest state sent, whole, while the thread runs (a restored page reads it); else ``None``. Any thread."""
        return self.states.full if self.running else None

    # -- thread ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether the thread runs (a ``hello`` will be answered by it)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> Publisher:
        """Start the thread in a copy of the caller's context (call from the cell)."""
        context = contextvars.copy_context()
        self._thread = OurThread(target=context.run, args=(self._loop,), name="trainmeter-publisher")
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
        self.feed.stop_reading()
        with contextlib.suppress(Exception):
            self.monitor.set_text(True)
            self.monitor.warn_once("widget-publisher", f"live widget stopped updating: {exc!r}; text lines resume")

    def request_snapshot(self) -> None:
        """Ask for a ``snapshot`` message on the next tick. Any thread."""
        self._snapshot.set()

    # -- one tick -----------------------------------------------------------------------------
    def tick(self, now_s: float | None = None) -> int:
        """Read new points and send what changed; returns the messages sent. Publisher thread."""
        now = self.clock() if now_s is None else now_s
        self.feed.read(now)
        if now - self._last_live_s >= LIVE_INTERVAL_S:
            self._last_live_s = now
            self.feed.sample_recent()
        if self._snapshot.is_set():  # a page said hello: the whole state and history
            if not self._budget.allow(now):
                return 0
            self._snapshot.clear()
            self._note_state(now)
            frame = self.feed.full_frame(include_open=False)
            full = {"rev": self.states.rev, "full": self.states.full}
            self._send({"kind": "snapshot", "seq": self.feed.seq, "state": full}, [frame])
            return 1
        due_state = now - self._last_state_s >= self.state_interval_s
        if self.keyframes and now >= self._next_keyframe_s:  # marimo: its front end loads late and says no hello
            if not self._budget.allow(now):
                return 0
            self._next_keyframe_s = now + self._keyframe_gap_s
            self._keyframe_gap_s = min(2 * self._keyframe_gap_s, MARIMO_KEYFRAME_S[1])
            self._note_state(now)
            self._set("state", self.states.full)  # an equal dict sends nothing (traitlets compares)
            self._set("history", self.feed.full_frame(include_open=False))
            return 2
        if not (due_state or self.feed.pending) or not self._budget.allow(now):
            return 0
        content: dict[str, Any] = {"kind": "state"}
        buffers: list[bytes] = []
        if due_state:
            base = self.states.rev
            ops = self._note_state(now)
            if ops:
                content["state"] = {"rev": self.states.rev, "base": base, "ops": ops}
        appended = self.feed.append_frame()
        if appended is not None:
            frame, replaced = appended
            content.update(kind="append", seq=self.feed.seq)
            if replaced:
                content["replace"] = replaced
            buffers.append(frame)
        if len(content) == 1:
            return 0
        self._send(content, buffers)
        return 1

    def _note_state(self, now: float | None) -> list[list[Any]]:
        """Build the state (``now``: a live one, with the recent figures; ``None``: the final one) and take it as the
        front end's next; returns the patch."""
        if now is not None:
            self._last_state_s = now
        recent = self.feed.recent if now is not None else None
        state = build_state(facts_from_monitor(self.monitor, recent=recent, x_map=self.feed.x_map))
        self.feed.shown = shown_series(state)  # past the series cap, frames carry what the charts draw
        return self.states.note(state)

    # -- sends -------------------------------------------------------------------------------------
    def _send(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        self.widget.send(content, buffers=buffers or None)
        self.bytes_sent += sum(len(b) for b in buffers) + len(json.dumps(content))

    def _set(self, trait: str, value: Any) -> None:
        """Set the ``state`` or ``history`` traitlet whole."""
        setattr(self.widget, trait, value)
        self.bytes_sent += len(value) if isinstance(value, bytes) else len(json.dumps(value))

    # -- display and the end -----------------------------------------------------------------------
    def show(self) -> Any:
        """Display the widget (one more view) with a display handle; returns the handle.

        In marimo the widget object goes into the cell's output (no handle: it stays the live view), caught up by
        keyframes (:data:`MARIMO_KEYFRAME_S`), as marimo answers no ``hello`` while the cell trains.
        """
        if in_marimo():
            self.keyframes = MARIMO_KEYFRAME_S
            show_in_marimo(self.widget)
            return None
        from IPython.display import display

        bundle = self.widget._repr_mimebundle_()  # anywidget returns (data, metadata)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        handle = display(dict(data or {}), metadata=dict(metadata or {}), raw=True, display_id=True)
        if handle is not None:
            self.handles.append(handle)
            from trainmeter.widget.attach import watch_close

            watch_close(self)  # a close cut before it began is run after the next cell
        return handle

    def close(self, *, retry: bool = False) -> None:
        """Stop the thread; send the final state and history; add the HTML snapshot (docs/spec.md section 18).

        Ctrl-C is held back meanwhile, and a part cut by a ``KeyboardInterrupt`` runs once more, so
        the output always ends with the static dashboard; a fault in a part warns once. ``retry``:
        run the parts again when a close began but did not complete (the next cell's end).

        Raises:
            KeyboardInterrupt: Only for a Ctrl-C during the close, once the close is whole.
        """
        if self.closed_whole or (self.closed and not retry):
            return
        held = HeldInterrupts()
        interrupted = False
        try:
            with held:
                self.closed = True
                self._stop.set()
                if self._thread is not None and self._thread is not threading.current_thread():
                    self._thread.join(timeout=10.0)
                interrupted = self._close_parts()
                self.closed_whole = True
                self.feed.release()
        finally:
            uninstall = getattr(self.restore_router, "uninstall", None)  # no run live: the kernel's own routing
            if uninstall is not None:
                uninstall()  # never raises
        held.deliver()  # a Ctrl-C held back meanwhile: raised now, after the close
        if interrupted:
            raise KeyboardInterrupt

    def _close_parts(self) -> bool:
        """The close's sends, each once and once more after a ``KeyboardInterrupt``; returns whether one came. The
        parts after the first read the final state it noted (``states.full``): they run only once it completed."""

        def final_state() -> None:
            self.feed.read()
            self._note_state(None)
            self._set("state", self.states.full)

        def displays() -> None:  # every live view becomes the static dashboard, re-mounted live (protocol section 4)
            if not self.handles:
                return
            from trainmeter.widget.snapshot import snapshot_bundle

            bundle = snapshot_bundle(self.states.full, self.feed.series_columns(),
                                     mount_key=getattr(self.widget, "store_key", None))
            for handle in self.handles:
                handle.update(bundle, raw=True)
            if self.restores_seen() > self._restores_at_start:  # restored while live
                self.widget.send({"kind": "final", "data": bundle})  # a reloaded page's output (reattach.ts)

        attach = getattr(self.widget, "attach", None)  # called with None: hello is answered from the history
        parts: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("state", final_state),
            ("dashboard-file", lambda: save_dashboard(getattr(self.monitor, "run_dir", None), self.states.full)),
            ("history", lambda: self._set("history", self.feed.full_frame(include_open=True))),
            ("attach", lambda: attach(None) if attach is not None else None), ("displays", displays))
        return run_parts(parts, lambda key, exc: self.monitor.warn_once(
            f"widget-close-{key}", f"the widget's final update failed: {exc!r}"), needs_first=True)

    def use_restore_router(self, router: Any) -> None:
        """Count page restores with ``router`` (widget/restore_route.py's, or ``None``) from now on. Main thread,
        before :meth:`start`."""
        self.restore_router = router
        self._restores_at_start = self.restores_seen()

    def restores_seen(self) -> int:
        """Restore requests the kernel's router diverted so far (0 without one)."""
        router = self.restore_router
        return 0 if router is None else int(router.diverted.get("kernel_info_request", 0))
