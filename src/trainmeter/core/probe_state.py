"""The probes' per-call state (:class:`ProbeState`, closed over by core/wrappers.py) and their training threads.

:class:`ProbeThreads`: each thread's calls, backward passes and steps in its own lane (docs/spec.md section 2,
"Threads"). Lane 1's thread keeps the fast paths while it trains alone; the first training event from another thread
starts *threaded mode* for the rest of the run: every wrapper takes its general path, through the thread's
:class:`~trainmeter.core.lanes.Lane`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any

from trainmeter.core.batch import count_batch
from trainmeter.core.lanes import Lane
from trainmeter.core.loss_capture import add_part
from trainmeter.core.reachable import most_trained, trained_params
from trainmeter.core.scalars import StepLoss


class _Nobody:
    """What the call wrapper's root reference returns while no root is counted: never a module."""

    __slots__ = ("__weakref__",)


_NOBODY = _Nobody()
NO_ROOT = weakref.ref(_NOBODY)  # fast_ref while no root's calls take the fast path


class ProbeState:
    """The probes' fast flags, the root's last counted batch, the loss parts of the step in progress, and the cold
    switches (each set through a method that calls ``refresh``: ``TorchProbes._refresh_fast``, which recomputes the
    fast flags). :meth:`new_probe_state` sets every per-call field."""

    __slots__ = (
        "primary", "fast_ref", "call_impl", "fast_backward", "steady", "backward_on", "in_backward", "depth", "calls",
        "pending_tokens",
        "last_type", "last_shape", "last_dtype", "last_key", "last_before", "last_tokens", "fast_calls",
        "fast_parts", "fast_sum", "fast_divided", "fast_first",
        "active", "paused", "paused_ident", "on_training", "capture_on", "refresh",
    )

    def __init__(self, refresh: Callable[[], None]) -> None:
        self.refresh = refresh
        self.active = False  # the probes are installed (between ``start`` and ``stop``)
        self.paused = False  # the paused thread's forward and backward calls are not counted (our FLOP count; a fault)
        self.paused_ident = 0  # the thread that paused (our FLOP count runs there)
        # called at each training forward, backward and step while set (an open eval span)
        self.on_training: Callable[[], None] | None = None
        self.capture_on = False  # loss capture is installed and not disabled by a fault
        self.new_probe_state()

    def new_probe_state(self) -> None:
        """The probes' fast flags and the step's calls and loss parts, as before any call was seen."""
        self.primary: Any = None  # a weak reference to the primary optimizer (OptimizerSteps), or None
        # the hot paths' flags (TorchProbes._refresh_fast): the root's weak reference while its batches are counted
        # like the last one (else NO_ROOT: a call and an identity test cost less than comparing an id on CPython
        # 3.11), torch's Module._call_impl while the fast call may call it (else None), the backward and step ones
        self.fast_ref: Callable[[], Any] = NO_ROOT
        self.call_impl: Callable[..., Any] | None = None
        self.fast_backward = False
        self.steady = False
        self.backward_on = False  # loss capture installed and not disabled by a fault
        self.in_backward = False
        self.depth = 0  # nesting of watched calls (the outermost one counts)
        self.calls = 0  # calls of the root since the last step
        self.pending_tokens = 0  # tokens counted since the last step
        # the root's last counted batch (the fast call's): type, shape, dtype, count; for a keyword-only batch its
        # token keyword and the token keys absent before it (core/batch.py)
        self.fast_calls = False
        self.last_type: Any = None
        self.last_shape: Any = None
        self.last_dtype: Any = None
        self.last_key: str | None = None  # None: a positional batch
        self.last_before: tuple[str, ...] = ()
        self.last_tokens = 0
        self.clear_fast_loss()

    def primary_optimizer(self) -> Any:
        """The primary optimizer, or ``None`` (none stepped yet, or it is gone). Any thread."""
        ref = self.primary
        return ref() if ref is not None else None

    def clear_fast_loss(self) -> None:
        """Forget the loss parts read on the backward fast path (each a 0-d CPU tensor read at once)."""
        self.fast_parts = 0
        self.fast_sum = 0.0
        self.fast_divided = True  # every part after the first was divided (folded in from the second part on)
        # the first part's tensor, held to the step or the second part (which reads its grad_fn)
        self.fast_first: Any = None

    def pause(self, paused: bool, *, refresh: bool = True) -> None:
        """Stop (or resume) counting the calling thread's calls (``refresh``: recompute the fast flags)."""
        self.paused = paused
        self.paused_ident = get_ident()
        if refresh:
            self.refresh()

    def switch(self, **switches: Any) -> None:
        """Set switches (``active``, ``on_training``, ``capture_on`` and ``backward_on``), then ``refresh``."""
        for name, value in switches.items():
            setattr(self, name, value)
        self.refresh()

    def paused_in(self, ident: int) -> bool:
        """Our own passes (the FLOP count) run in thread ``ident`` now."""
        return self.paused and self.paused_ident == ident


def guarded(warn: Callable[[str, str], None], key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn``; on a fault warn once under ``key`` (that probe is disabled) and return ``None``."""
    try:
        return fn(*args)
    except Exception as exc:
        warn(key, f"{key} disabled: {exc!r}")
        return None


class ProbeThreads:
    """The probes' training threads: ``hot_ident``, ``threading.get_ident()`` of lane 1's thread (0 before any training
    event; any thread reads it), ``hot_thread`` its name, ``threaded`` once a second thread trained (the fast paths are
    off for the rest of the run). Each ``lane_*`` method runs on its event's thread and writes its lane only."""

    def __init__(self, hot: Any, monitor: Any) -> None:
        self._hot = hot
        self._monitor = monitor
        self.hot_thread = ""
        self.reset()

    def reset(self) -> None:
        """Forget the threads (a forked child's are not the parent's, nor its lock's holder)."""
        self._lock = threading.Lock()
        self._lanes: dict[int, Lane] = {}
        self.hot_ident = 0
        self.threaded = False

    def thread_lane(self) -> Lane | None:
        """The calling thread's lane, or ``None`` on lane 1's thread (which becomes lane 1's if none is yet)."""
        ident = get_ident()
        if ident == self.hot_ident:
            return None
        lane = self._lanes.get(ident) or self._new_thread(ident)
        return None if lane is None or lane.hot else lane

    def thread_state(self) -> Lane:
        """The calling thread's lane, lane 1's thread included (threaded mode only: lane 1's thread has one)."""
        ident = get_ident()
        return self._lanes.get(ident) or self._new_thread(ident)  # type: ignore[return-value]

    def current(self) -> Lane | None:
        """The calling thread's lane (lane 1's in threaded mode), or ``None`` on lane 1's thread training alone."""
        if self.threaded:
            return self.thread_state()
        return self.thread_lane() if self.hot_ident else None

    def _new_thread(self, ident: int) -> Lane | None:
        """A thread seen training for the first time: lane 1's thread if none is yet, else a lane of its own."""
        with self._lock:  # once per thread, never per step
            if not self.hot_ident:
                self.hot_ident = ident
                self.hot_thread = threading.current_thread().name
                self._hot.refresh()
                return None
            lane = self._lanes.get(ident)
            if lane is not None or ident == self.hot_ident:
                return lane
            lane = Lane(ident, threading.current_thread().name)
            self._lanes[ident] = lane
            if not self.threaded:
                self._lanes[self.hot_ident] = Lane(self.hot_ident, self.hot_thread, hot=True)
                self.threaded = True
                self._hot.backward_on = False  # the backward wrapper's aside path, with per-thread flags
                self._hot.refresh()
                self._monitor.warn_once("threads", (
                    "training in several threads: each thread's optimizer steps and samples are counted in a lane "
                    "of its own (its loss in train_loss.lane<N>); the headline steps and samples are the sums over "
                    "the lanes (passport lanes)"))
        return lane

    def lane_call(self, lane: Lane, module: Any, args: Any, kwargs: Any, lightning: bool) -> None:
        """A training call of a watched module in lane ``lane``'s thread: its batch counted for the lane."""
        key = id(module)
        if self._hot.paused_in(lane.ident) or (lane.root_id and key != lane.root_id):
            return
        try:
            counted = count_batch(args[:1] if lightning else args, kwargs)
        except Exception as exc:
            self._monitor.warn_once(f"lane-tokens-{lane.thread}", f"token counting in thread {lane.thread!r} "
                                                                  f"disabled: {exc!r}")
            return
        if key == lane.root_id:
            lane.calls += 1
            if counted is not None:
                lane.pending_tokens += counted[0]
                lane.unit = counted[1]
            return
        seen = lane.seen.get(key)
        if seen is None:
            seen = lane.seen[key] = [0, 0, None, weakref.ref(module)]
        seen[1] += 1
        if counted is not None:
            seen[0] += counted[0]
            seen[2] = counted[1]

    def lane_backward(self, lane: Lane, tensors: Any) -> None:
        """A backward call in lane ``lane``'s thread: its 0-d loss is a part of the lane's step loss."""
        try:
            for tensor in tensors if isinstance(tensors, (tuple, list)) else (tensors,):
                if getattr(tensor, "ndim", None) != 0:
                    continue
                if lane.loss is None:
                    lane.loss = StepLoss(lane.loss_name)
                add_part(lane.loss, lane.reader, tensor, lane)
        except Exception as exc:
            lane.loss = None
            self._monitor.warn_once(f"lane-loss-{lane.thread}", f"loss capture in thread {lane.thread!r} "
                                                                f"failed: {exc!r}")

    def lane_step(self, lane: Lane, optimizer: Any) -> None:
        """An optimizer step in lane ``lane``'s thread: the lane's first optimizer counts, another's loss is its own."""
        mine = lane.optimizer() if lane.optimizer is not None else None
        if mine is None:  # the thread's first step (or its optimizer is gone: a new model in the thread)
            lane.optimizer = weakref.ref(optimizer)
            lane.optimizer_name = type(optimizer).__name__
            if not lane.number:
                self._monitor.lanes.add(lane)
            self._lane_root(lane, optimizer)
        tokens, lane.pending_tokens = lane.pending_tokens, 0
        lane.calls = 0
        loss, lane.loss = lane.loss, None
        if mine is not None and mine is not optimizer:  # a second optimizer here (a GAN's): not counted, its own loss
            number = lane.others.setdefault(id(optimizer), len(lane.others) + 2)
            if loss is not None:
                loss.series = f"{lane.loss_name}.optimizer{number}"
                self._monitor.lanes.on_loss(lane, loss)
            return
        if loss is not None:
            loss.series = lane.loss_name
        self._monitor.lanes.on_step(lane, tokens, loss)

    def _lane_root(self, lane: Lane, optimizer: Any) -> None:
        """Lane ``lane``'s root: the called module holding most of its optimizer's parameters; credit its batches."""
        called = list(lane.seen.values())
        modules = [seen[3]() for seen in called]
        index = most_trained(trained_params(optimizer), modules)
        lane.seen.clear()
        if index is None:
            self._monitor.warn_once(f"lane-root-{lane.thread}", (
                f"thread {lane.thread!r} steps {type(optimizer).__name__} but no module holding its parameters was "
                "seen called there: its steps count, its samples do not (build its model and optimizer in the "
                "monitored cell or in that thread)"))
            return
        module, seen = modules[index], called[index]
        lane.root_id = id(module)
        lane.root_name = type(module).__name__
        lane.pending_tokens += seen[0]
        lane.calls += seen[1]
        lane.unit = seen[2] or lane.unit
