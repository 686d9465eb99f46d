"""Training in several threads: each thread's calls, backward passes and steps go to its own lane (docs/spec.md §2).

Lane 1's thread keeps the probes' own state and fast paths while it trains alone; the first training event from
another thread starts *threaded mode* for the rest of the run (docs/spec.md section 2, "Threads"): every wrapper
takes its general path, which looks up the calling thread's :class:`~trainmeter.core.lanes.Lane`.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from trainmeter.core.batch import count_batch
from trainmeter.core.lanes import Lane
from trainmeter.core.loss_capture import add_part
from trainmeter.core.reachable import most_trained, trained_params
from trainmeter.core.scalars import StepLoss

_get_ident = threading.get_ident


class ProbeThreads:
    """The probes' training threads: lane 1's thread, the other threads' lanes, threaded mode.

    Attributes:
        hot_ident: ``threading.get_ident()`` of lane 1's thread, 0 before any training event. Any thread.
        hot_thread: Lane 1's thread name.
        threaded: A second thread trained: the fast paths are off for the rest of the run.

    Each ``lane_*`` method runs on the thread whose event it handles and writes that thread's lane only.
    """

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

    # -- which thread --------------------------------------------------------------
    def thread_lane(self) -> Lane | None:
        """The calling thread's lane, or ``None`` on lane 1's thread (which becomes lane 1's if none is yet)."""
        ident = _get_ident()
        if ident == self.hot_ident:
            return None
        lane = self._lanes.get(ident)
        if lane is None:
            lane = self._new_thread(ident)
        return None if lane is None or lane.hot else lane

    def thread_state(self) -> Lane:
        """The calling thread's lane, lane 1's thread included (threaded mode only)."""
        ident = _get_ident()
        lane = self._lanes.get(ident)
        if lane is None:
            self._new_thread(ident)
            lane = self._lanes[ident]
        return lane

    def current(self) -> Lane | None:
        """The calling thread's lane (lane 1's in threaded mode), or ``None`` on lane 1's thread while it trains
        alone (or before any thread trained)."""
        if self.threaded or (self.hot_ident and _get_ident() != self.hot_ident):
            return self.thread_state() if self.threaded else self.thread_lane()
        return None

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

    # -- one lane's events ---------------------------------------------------------------
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
                if add_part(lane.loss, lane.reader, tensor, lane.scaled):
                    lane.scaled = None
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
        elif mine is not optimizer:  # a second optimizer in this thread (a GAN's): not counted, its own loss
            number = lane.others.setdefault(id(optimizer), len(lane.others) + 2)
            loss, lane.loss = lane.loss, None
            lane.pending_tokens = lane.calls = 0
            if loss is not None:
                loss.series = f"{lane.loss_name}.optimizer{number}"
                self._monitor.lanes.on_loss(lane, loss)
            return
        tokens, lane.pending_tokens = lane.pending_tokens, 0
        lane.calls = 0
        loss, lane.loss = lane.loss, None
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
