"""Training in several threads: each thread's calls, backward passes and steps go to its own lane (docs/spec.md §2).

Lane 1's thread (the first that trains) keeps the probes' own state and fast paths while it trains
alone. The first training event from another thread starts *threaded mode* for the rest of the
run: the fast paths are switched off (they hold lane 1's state in place) and every wrapper takes its
general path, which looks up the calling thread's :class:`~trainmeter.core.lanes.Lane` (one
``threading.get_ident()`` and one dict read; a lock only when a thread is seen first).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from trainmeter.core.batch import count_batch
from trainmeter.core.lanes import Lane
from trainmeter.core.loss_capture import add_part
from trainmeter.core.scalars import StepLoss

_get_ident = threading.get_ident


class LaneProbes:
    """The probes' per-thread paths (a part of :class:`~trainmeter.core.probes.TorchProbes`).

    Each method runs on the thread whose event it handles and writes that thread's lane only.
    """

    _threads: dict[int, Lane]
    _threaded: bool
    _hot_ident: int

    def lane_one(self) -> tuple[str, str | None, str | None]:
        """Lane 1's thread name, root class name and optimizer class name (empty or ``None`` when unknown). Any thread."""
        primary = self._primary() if self._primary is not None else None
        return self._hot_thread, self.root_name, type(primary).__name__ if primary is not None else None

    @property
    def hot_ident(self) -> int:
        """``threading.get_ident()`` of lane 1's thread, 0 before any training event. Any thread."""
        return self._hot_ident

    # -- which thread --------------------------------------------------------------
    def _thread_lane(self) -> Lane | None:
        """The calling thread's lane, or ``None`` on lane 1's thread (which becomes lane 1's if none is yet)."""
        ident = _get_ident()
        if ident == self._hot_ident:
            return None
        lane = self._threads.get(ident)
        if lane is None:
            lane = self._new_thread(ident)
        return None if lane is None or lane.hot else lane

    def _thread_state(self) -> Lane:
        """The calling thread's lane, lane 1's thread included (threaded mode only)."""
        ident = _get_ident()
        lane = self._threads.get(ident)
        if lane is None:
            self._new_thread(ident)
            lane = self._threads[ident]
        return lane

    def _new_thread(self, ident: int) -> Lane | None:
        """A thread seen training for the first time: lane 1's thread if none is yet, else a lane of its own."""
        with self._lanes_lock:  # once per thread, never per step
            if not self._hot_ident:
                self._hot_ident = ident
                self._hot_thread = threading.current_thread().name
                self._refresh_fast()
                return None
            lane = self._threads.get(ident)
            if lane is not None or ident == self._hot_ident:
                return lane
            lane = Lane(ident, threading.current_thread().name)
            self._threads[ident] = lane
            if not self._threaded:
                self._threads[self._hot_ident] = Lane(self._hot_ident, self._hot_thread, hot=True)
                self._threaded = True
                self.hot.backward_on = False  # the backward wrapper's aside path, with per-thread flags
                self._refresh_fast()
                self._monitor.warn_once("threads", (
                    "training in several threads: each thread's optimizer steps and samples are counted in a lane "
                    "of its own (its loss in train_loss.lane<N>); the headline steps and samples are the sums over "
                    "the lanes (passport lanes)"))
        return lane

    def _note_scaled(self, out: Any, scale: Any, divided: bool) -> None:
        """The loss ``GradScaler.scale`` returned and its scale tensor, kept for the calling thread's next backward
        (lane 1's in the probes, another thread's in its lane): its scale is divided out there."""
        scaled = (weakref.ref(out), scale, divided)
        self.hot.fast_backward = False  # the backward of ``out`` takes the general path, which divides it out
        if self._threaded or (self._hot_ident and _get_ident() != self._hot_ident):
            lane = self._thread_state() if self._threaded else self._thread_lane()
            if lane is not None and not lane.hot:
                lane.scaled = scaled
                return
        self._scaled = scaled

    def _paused_in(self, lane: Lane) -> bool:
        """Our own forward and backward (the FLOP count) run in this thread now."""
        return self._paused and self._paused_ident == lane.ident

    # -- the wrappers' per-thread paths ------------------------------------------------
    def _lane_call(self, original: Any, module: Any, args: Any, kwargs: Any, lightning: bool) -> Any:
        """A watched module's call in threaded mode: the outermost call per thread counts."""
        lane = self._thread_state()
        if lane.depth:
            return original(module, *args, **kwargs)
        lane.depth += 1
        try:
            if lane.hot:
                self._on_call(module, args, kwargs, lightning)
            else:
                self._lane_on_call(lane, module, args, kwargs, lightning)
            return original(module, *args, **kwargs)
        finally:
            lane.depth -= 1

    def _backward_aside(self, original: Any, *args: Any) -> Any:
        """The backward wrapper's other path: a nested backward, capture off, or training in several threads."""
        if self._capture_on and (self._threaded or (self._hot_ident and _get_ident() != self._hot_ident)):
            lane = self._thread_state() if self._threaded else self._thread_lane()
            if lane is not None and not lane.in_backward:
                lane.in_backward = True
                try:
                    if args[1] is None and not self._paused_in(lane):
                        if lane.hot:
                            self._on_backward(args[0])
                        else:
                            self._lane_backward(lane, args[0])
                    return original(*args)
                finally:
                    lane.in_backward = False
        return original(*args)

    # -- one lane's events ---------------------------------------------------------------
    def _lane_on_call(self, lane: Lane, module: Any, args: Any, kwargs: Any, lightning: bool) -> None:
        """A watched module called in lane ``lane``'s thread: its batch counted for the lane."""
        if not (lightning or self._torch.is_grad_enabled()) or self._paused_in(lane):
            return
        key = id(module)
        candidate = self._candidates.get(key)
        if candidate is None or candidate.ref() is not module or (lane.root_id and key != lane.root_id):
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

    def _lane_backward(self, lane: Lane, tensors: Any) -> None:
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

    def _lane_step(self, lane: Lane, optimizer: Any) -> None:
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
        trained = self._trained(optimizer)
        best: tuple[int, int, Any, list[Any]] | None = None
        for seen in lane.seen.values():
            module = seen[3]()
            if module is None:
                continue
            overlap = sum(trained.get(id(p), 0) for p in module.parameters())
            size = sum(1 for _ in module.modules())
            if overlap and (best is None or (overlap, size) > best[:2]):
                best = (overlap, size, module, seen)
        lane.seen.clear()
        if best is None:
            self._monitor.warn_once(f"lane-root-{lane.thread}", (
                f"thread {lane.thread!r} steps {type(optimizer).__name__} but no module holding its parameters was "
                "seen called there: its steps count, its samples do not (build its model and optimizer in the "
                "monitored cell or in that thread)"))
            return
        _, _, module, seen = best
        lane.root_id = id(module)
        lane.root_name = type(module).__name__
        lane.pending_tokens += seen[0]
        lane.calls += seen[1]
        lane.unit = seen[2] or lane.unit
