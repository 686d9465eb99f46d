"""Lanes: steps and losses of models trained in other threads, and the headline sums (docs/spec.md §2)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainmeter.core.lanes import MAX_LANE_LOSSES, MAX_LANES, Lane, LaneRecord, lane_loss_series, mean_step_s
from trainmeter.core.scalars import StepLoss
from trainmeter.core.series_registry import SeriesRegistry
from trainmeter.core.steps import StepRecorder


class Lanes:
    """The lanes of one run besides lane 1 (whose step rule is ``steps``), and lane 1's first and last step times.
    Thread safety: per method."""

    def __init__(self, steps: StepRecorder, registry: SeriesRegistry, report: Callable[[], None]) -> None:
        self._steps = steps
        self._registry = registry
        self._report = report
        self.new_run()

    def new_run(self) -> None:
        """No lane but lane 1 (a new run, a forked child)."""
        self.lanes: list[Lane] = []
        self._lock = threading.Lock()
        self._lane1_first_t_s: float | None = None
        self._lane1_last_t_s: float | None = None

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
            lane.loss_name = lane_loss_series(lane.number)
            self.lanes.append(lane)
        self._registry.describe(lane.loss_name, {
            "provenance": "measured",
            "source": f"loss capture in thread {lane.thread!r} (lane {lane.number}): the sum of the values passed "
                      f"to backward there between steps of its optimizer {lane.optimizer_name}",
            "note": "x is the lane's own step"}, replace=False)

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
            self._queue(lane, loss, count, t_s)
        if lane.losses:
            self.flush(lane)
        if now >= steps.next_report_s:
            self._report()

    def on_loss(self, lane: Lane, loss: StepLoss) -> None:
        """The loss of another optimizer's step in ``lane``'s thread, at the lane's current step (its thread)."""
        self._queue(lane, loss, lane.steps, self._steps.now() - self._steps.t0_s)
        self.flush(lane)

    def _queue(self, lane: Lane, loss: StepLoss, step: int, t_s: float) -> None:
        loss.step = step
        loss.t_s = t_s
        loss.closed = True
        if len(lane.losses) >= MAX_LANE_LOSSES:
            lane.losses.popleft()  # its reads never completed: leave it out
        lane.losses.append(loss)

    def flush(self, lane: Lane) -> None:
        """Append the lane's ready losses to their series, in order (its thread, or the final report)."""
        for key, value in lane.reader.poll():
            step_loss, index, field = key  # type: ignore[misc]
            step_loss.resolve(index, field, value)
        losses = lane.losses
        while losses and losses[0].ready:
            loss = losses.popleft()
            value = loss.value()
            if value is not None:
                self._registry.get(loss.series).append(loss.step, loss.t_s, value)

    def note_lane1_times(self) -> None:
        """Remember lane 1's first and last step times before the step series is trimmed (at a report)."""
        series = self._steps.step_series
        times = series.times
        if times:
            if self._lane1_first_t_s is None and series.end == len(times):
                self._lane1_first_t_s = times[0]
            self._lane1_last_t_s = times[-1]

    def records(self, unit: str, lane_one: Callable[[], tuple[str, Any, Any]] | None) -> list[LaneRecord]:
        """Every lane with a step, lane 1 (named by ``lane_one()``) first, at most ``MAX_LANES`` (any thread)."""
        steps = self._steps
        records: list[LaneRecord] = []
        if steps.steps:
            self.note_lane1_times()
            first, last = self._lane1_first_t_s, self._lane1_last_t_s
            thread, model, optimizer = lane_one() if lane_one is not None else ("", None, None)
            records.append(LaneRecord(
                lane=1, thread=thread or threading.current_thread().name, model=model, optimizer=optimizer,
                steps=steps.steps, tokens=steps.tokens, unit=unit, step_s=mean_step_s(first, last, steps.steps),
                loss_series="train_loss"))
        records += [lane.record(unit) for lane in list(self.lanes)[:MAX_LANES]]
        return records
