"""Lanes on the monitor: steps and losses of models trained in other threads, and the headline sums (docs/spec.md §2).

Each lane's counters and loss series are written by its own thread only; the headline
steps and tokens add lane 1's (the hot state's) and every other lane's, read without a lock
(each an int written by one thread). A lane's step may run the report when the interval has
passed (:meth:`~trainmeter.core.reports.Reports._maybe_report` never waits: one thread reports,
the others go on).
"""

from __future__ import annotations

import threading
from typing import Any

from trainmeter.core.hot_state import HotState
from trainmeter.core.lanes import MAX_LANE_LOSSES, MAX_LANES, Lane, LaneRecord, lane_loss_series
from trainmeter.core.scalars import StepLoss


class LaneSteps:
    """The lanes of one run (a part of :class:`~trainmeter.core.monitor.Monitor`). Thread safety: per method."""

    hot: HotState
    lanes: list[Lane]
    series_info: dict[str, dict[str, Any]]
    token_unit: str
    probes: Any

    def _new_lanes(self) -> None:
        """No lane but lane 1 (a new run, a forked child)."""
        self.lanes = []
        self._lanes_lock = threading.Lock()
        self._lane1_first_t_s: float | None = None
        self._lane1_last_t_s: float | None = None

    def lanes_steps(self) -> int:
        """Steps counted in lanes 2, 3, ... (any thread)."""
        return sum(lane.steps for lane in list(self.lanes))

    def lanes_tokens(self) -> int:
        """Tokens or samples counted in lanes 2, 3, ... (any thread)."""
        return sum(lane.tokens for lane in list(self.lanes))

    def add_lane(self, lane: Lane) -> None:
        """Number a thread's lane at its first step and name its loss series (that thread)."""
        with self._lanes_lock:  # once per lane
            lane.number = len(self.lanes) + 2
            lane.loss_name = lane_loss_series(lane.number)
            self.lanes.append(lane)
        self.series_info.setdefault(lane.loss_name, {
            "provenance": "measured",
            "source": f"loss capture in thread {lane.thread!r} (lane {lane.number}): the sum of the values passed "
                      f"to backward there between steps of its optimizer {lane.optimizer_name}",
            "note": "x is the lane's own step"})

    def on_lane_step(self, lane: Lane, tokens: int, loss: StepLoss | None) -> None:
        """One optimizer step of ``lane`` (its own thread): counted, its loss recorded, the report run if due."""
        hot = self.hot
        now = hot.now()
        t_s = now - hot.t0_s
        lane.tokens += tokens
        lane.steps = steps = lane.steps + 1
        if lane.first_t_s is None:
            lane.first_t_s = t_s
        lane.last_t_s = t_s
        if loss is not None:
            self._queue_lane_loss(lane, loss, steps, t_s)
        if lane.losses:
            self._flush_lane(lane)
        if now >= hot.next_report_s:
            self._maybe_report()

    def on_lane_loss(self, lane: Lane, loss: StepLoss) -> None:
        """The loss of another optimizer's step in ``lane``'s thread, at the lane's current step (its thread)."""
        self._queue_lane_loss(lane, loss, lane.steps, self.hot.now() - self.hot.t0_s)
        self._flush_lane(lane)

    def _queue_lane_loss(self, lane: Lane, loss: StepLoss, step: int, t_s: float) -> None:
        loss.step = step
        loss.t_s = t_s
        loss.closed = True
        if len(lane.losses) >= MAX_LANE_LOSSES:
            lane.losses.popleft()  # its reads never completed: leave it out
        lane.losses.append(loss)

    def _flush_lane(self, lane: Lane) -> None:
        """Append the lane's ready losses to their series, in order (its thread, or the final report)."""
        for key, value in lane.reader.poll():
            step_loss, index, field = key  # type: ignore[misc]
            step_loss.resolve(index, field, value)
        losses = lane.losses
        while losses and losses[0].ready:
            loss = losses.popleft()
            value = loss.value()
            if value is not None:
                self._series(loss.series).append(loss.step, loss.t_s, value)

    def _note_lane1_times(self) -> None:
        """Remember lane 1's first and last step times before the step series is trimmed (at a report)."""
        series = self.hot.step_series
        times = series.times
        if times:
            if self._lane1_first_t_s is None and series.end == len(times):
                self._lane1_first_t_s = times[0]
            self._lane1_last_t_s = times[-1]

    def lane_records(self) -> list[LaneRecord]:
        """Every lane with a step, lane 1 first, at most ``MAX_LANES`` (any thread)."""
        hot = self.hot
        records: list[LaneRecord] = []
        if hot.steps:
            self._note_lane1_times()
            first, last = self._lane1_first_t_s, self._lane1_last_t_s
            thread, model, optimizer = self.probes.lane_one() if self.probes is not None else ("", None, None)
            records.append(LaneRecord(
                lane=1, thread=thread or threading.current_thread().name, model=model, optimizer=optimizer,
                steps=hot.steps, tokens=hot.tokens, unit=self.token_unit,
                step_s=(last - first) / (hot.steps - 1) if first is not None and last is not None and hot.steps > 1
                else None, loss_series="train_loss"))
        records += [lane.record(self.token_unit) for lane in list(self.lanes)[:MAX_LANES]]
        return records
