"""Training lanes: one per (thread, optimizer) training a model, each counted by its own thread (docs/spec.md §2).

Each lane is written by its own thread only; the headline sums over them are read without a lock.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from trainmeter.core.controls import raise_stop
from trainmeter.core.scalars import ScalarReader, StepLoss
from trainmeter.core.series_registry import SeriesRegistry
from trainmeter.core.steps import LOSS_SERIES, StepRecorder

MAX_LANE_LOSSES = 4096
MAX_LANES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneRecord:
    """One lane as the passport's ``lanes`` names it (docs/spec.md §2, "Threads"): ``model`` and ``optimizer`` are
    class names; ``step_s``: mean seconds per step between the first and last step (``None`` below 2 steps)."""

    lane: int
    thread: str
    model: str | None
    optimizer: str | None
    steps: int
    tokens: int
    unit: str
    step_s: float | None
    loss_series: str
    stopped_at_step: int | None = None

    to_dict = asdict  # the passport's ``lanes`` entry


@dataclass(slots=True, eq=False)
class Lane:
    """One thread training a model (lane 2, 3, ...), or lane 1's thread (``hot``) for its flags. Written by its own
    thread only; its counters are read by any thread."""

    ident: int
    thread: str
    hot: bool = False
    number: int = 0  # set at its first step (lane numbers follow the order of first steps)
    depth: int = 0  # nesting of watched calls in this thread (the outermost one counts)
    in_backward: bool = False
    optimizer: weakref.ReferenceType[Any] | None = None  # the first optimizer that stepped here
    optimizer_name: str | None = None
    root_id: int = 0
    root_name: str | None = None
    unit: str | None = None
    seen: dict[int, list[Any]] = field(default_factory=dict)  # before its root: module id -> [tokens, calls, unit]
    pending_tokens: int = 0
    calls: int = 0
    loss: StepLoss | None = None  # the step's loss parts so far
    scaled: tuple[Any, Any, bool] | None = None  # the loss GradScaler.scale returned here, its scale
    reader: ScalarReader = field(default_factory=ScalarReader)  # its deferred reads (a CUDA loss), polled at its steps
    losses: deque[StepLoss] = field(default_factory=lambda: deque(maxlen=MAX_LANE_LOSSES))  # closed, being read
    loss_name: str = LOSS_SERIES
    others: dict[int, int] = field(default_factory=dict)  # another optimizer stepped in this thread -> its number
    steps: int = 0
    tokens: int = 0
    first_t_s: float | None = None
    last_t_s: float | None = None
    stopped_at: int | None = None  # the lane's step at which StopTraining was raised in its thread

    def record(self, unit: str) -> LaneRecord:
        """This lane as the passport names it (any thread)."""
        first, last, steps = self.first_t_s, self.last_t_s, self.steps
        step_s = (last - first) / (steps - 1) if first is not None and last is not None and steps > 1 else None
        return LaneRecord(lane=self.number, thread=self.thread, model=self.root_name, optimizer=self.optimizer_name,
                          steps=steps, tokens=self.tokens, unit=self.unit or unit, step_s=step_s,
                          loss_series=self.loss_name, stopped_at_step=self.stopped_at)


class Lanes:
    """The lanes of one run besides lane 1 (whose step rule is ``steps``), and lane 1's first and last step times."""

    def __init__(self, steps: StepRecorder, registry: SeriesRegistry, report: Callable[[], None]) -> None:
        self._steps = steps
        self._registry = registry
        self._report = report
        self._nonfinite: Callable[[Lane, int, float], None] | None = None  # watch_losses'
        self.new_run()

    def new_run(self) -> None:
        """No lane but lane 1 (a new run, a forked child)."""
        self.lanes: list[Lane] = []
        self._lock = threading.Lock()
        self._lane1_first_t_s: float | None = None
        self._lane1_last_t_s: float | None = None
        self.stop_by: str | None = None  # a stop asked (core/controls.py): each lane raises at its next step
        self.quiet_stop = False  # the stop's StopTraining ends a thread without its excepthook (host patch)

    def __bool__(self) -> bool:
        return bool(self.lanes)

    def steps(self) -> int:
        """Steps counted in lanes 2, 3, ... (any thread)."""
        return sum(lane.steps for lane in list(self.lanes))

    def tokens(self) -> int:
        """Tokens or samples counted in lanes 2, 3, ... (any thread)."""
        return sum(lane.tokens for lane in list(self.lanes))

    def add(self, lane: Lane) -> None:
        """Number a thread's lane at its first step and name its loss series (that thread)."""
        with self._lock:  # once per lane
            lane.number = len(self.lanes) + 2
            lane.loss_name = f"{LOSS_SERIES}.lane{lane.number}"  # (lane 1's is the headline train_loss)
            self.lanes.append(lane)
        self._registry.describe(lane.loss_name, {
            "provenance": "measured",
            "source": f"loss capture in thread {lane.thread!r} (lane {lane.number}): the sum of the values passed "
                      f"to backward there between steps of its optimizer {lane.optimizer_name}",
            "note": "x is the lane's own step"}, replace=False)

    def watch_losses(self, fn: Callable[[Lane, int, float], None] | None) -> None:
        """Call ``fn(lane, step, value)`` on a lane's thread when its loss recorded at its ``step`` is not finite,
        before that step's stop check (the alerts' ``nan`` check of lanes 2, 3, ..., docs/spec.md section 21)."""
        self._nonfinite = fn

    def on_step(self, lane: Lane, tokens: int, loss: StepLoss | None) -> None:
        """One optimizer step of ``lane`` (its own thread): counted, its loss recorded, the report run if due."""
        steps = self._steps
        now = steps.now()
        t_s = now - steps.t0_s
        lane.tokens += tokens
        lane.steps = count = lane.steps + 1
        if lane.first_t_s is None:
            lane.first_t_s = t_s
        lane.last_t_s = t_s
        if loss is not None:
            loss.step, loss.t_s = count, t_s
            lane.losses.append(loss)
        if lane.losses:
            self.flush(lane)
        if now >= steps.next_report_s:
            self._report()
        if self.stop_by is not None and lane.stopped_at is None:  # the lane's step boundary (docs/spec.md §21)
            lane.stopped_at = count
            raise_stop(self.stop_by, count, self.quiet_stop)

    def on_loss(self, lane: Lane, loss: StepLoss) -> None:
        """The loss of another optimizer's step in ``lane``'s thread, at the lane's current step (its thread)."""
        loss.step, loss.t_s = lane.steps, self._steps.now() - self._steps.t0_s
        lane.losses.append(loss)
        self.flush(lane)

    def flush(self, lane: Lane) -> None:
        """Append the lane's ready losses to their series, in order (its thread, or the final report)."""
        for (step_loss, index, part), value in lane.reader.poll():  # type: ignore[misc]
            step_loss.resolve(index, part, value)
        losses = lane.losses
        while losses and losses[0].ready:
            loss = losses.popleft()
            value = loss.value()
            if value is not None:
                self._registry.get(loss.series).append(loss.step, loss.t_s, value)
                watch = self._nonfinite
                if watch is not None and loss.series == lane.loss_name and not math.isfinite(value):
                    watch(lane, loss.step, value)

    def note_lane1_times(self) -> None:
        """Remember lane 1's first and last step times before the step series is trimmed (at a report)."""
        series = self._steps.step_series
        times = series.times
        if times:
            if self._lane1_first_t_s is None and series.end == len(times):
                self._lane1_first_t_s = times[0]
            self._lane1_last_t_s = times[-1]

    def records(self, unit: str, lane_one: Callable[[], tuple[str, Any, Any]] | None,
                lane1_stopped_at: int | None = None) -> list[LaneRecord]:
        """Every lane with a step, lane 1 (named by ``lane_one()``) first, at most ``MAX_LANES`` (any thread)."""
        steps = self._steps
        lanes = list(self.lanes)[:MAX_LANES]
        if steps.steps:  # lane 1 as a lane of its own
            self.note_lane1_times()
            thread, model, optimizer = lane_one() if lane_one is not None else ("", None, None)
            lanes.insert(0, Lane(0, thread or threading.current_thread().name, number=1, optimizer_name=optimizer,
                                 root_name=model, steps=steps.steps, tokens=steps.tokens, stopped_at=lane1_stopped_at,
                                 first_t_s=self._lane1_first_t_s, last_t_s=self._lane1_last_t_s))
        return [lane.record(unit) for lane in lanes]
