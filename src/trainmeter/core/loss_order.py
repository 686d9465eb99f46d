"""Loss ordering: a step's loss reaches its series after the next step, behind losses still being read."""

from __future__ import annotations

from collections import deque
from typing import Any

from trainmeter.core.scalars import StepLoss
from trainmeter.core.series import Series

LOSS_SERIES = "train_loss"
LATE_USER_LOSS = "train_loss.emitted"  # tm.emit(train_loss=...) that began after captured points
MAX_PENDING_LOSSES = 4096


class LossOrder:
    """The held and pending step losses (a part of :class:`~trainmeter.core.monitor.Monitor`). Training thread."""

    steps: int
    series_info: dict[str, dict[str, Any]]
    _losses: deque[StepLoss]
    _captured_series: Series | None

    def _step_losses(self, steps: int, t_s: float, loss: StepLoss | None, loss_value: float | None) -> None:
        """Scalar reads, queued emits and the step losses due at step ``steps`` (training thread)."""
        if self._scalars.queue:
            self._poll_scalars(t_s)
        if self._queued:
            self._drain_queue()
        held = self._held_step
        if held:  # the previous step's loss, read on the host: its step has passed (inline _flush_losses)
            self._held_step = 0
            if not self._user_loss:
                (self._captured_series or self._captured_loss_series()).append(held, self._held_t_s, self._held_value)
        if self._losses:
            self._flush_losses(steps)
        if loss_value is not None:
            if self._losses:  # keep the order behind losses still being read
                self.add_loss(StepLoss.read(LOSS_SERIES, loss_value), t_s)
            else:
                self._held_step = steps
                self._held_t_s = t_s
                self._held_value = loss_value
        elif loss is not None:
            self.add_loss(loss, t_s)


    def _captured_loss_series(self) -> Series:
        """The train_loss series, remembered as holding captured points (training thread)."""
        series = self._captured_series = self._series(LOSS_SERIES)
        return series

    def add_loss(self, loss: StepLoss, t_s: float | None = None) -> None:
        """Queue a closed step loss (at the current step) for its series (training thread)."""
        loss.step = self.steps
        loss.t_s = self._now() - self._t0_s if t_s is None else t_s
        loss.closed = True
        if len(self._losses) >= MAX_PENDING_LOSSES:
            self._losses.popleft()  # its reads never completed: leave it out
        self._losses.append(loss)

    def _flush_losses(self, before_step: float) -> None:
        """Append ready step losses of steps before ``before_step`` to their series, in order."""
        held = self._held_step
        if held and held < before_step:  # older than anything queued after it
            self._held_step = 0
            if not self._user_loss:
                (self._captured_series or self._captured_loss_series()).append(held, self._held_t_s, self._held_value)
        losses = self._losses
        while losses and losses[0].ready and losses[0].step < before_step:
            loss = losses.popleft()
            if loss.series == LOSS_SERIES and self._user_loss:
                continue  # the cell emits its own train_loss: it is the headline
            value = loss.value()
            if value is not None:
                if loss.series == LOSS_SERIES:
                    self._captured_series or self._captured_loss_series()
                self._series(loss.series).append(loss.step, loss.t_s, value)


    def _user_loss_name(self) -> str:
        """Where ``tm.emit(train_loss=...)`` goes: the headline, unless captured points are already there."""
        if self._late_user_loss:
            return LATE_USER_LOSS
        if self._captured_series is not None:
            self._late_user_loss = True
            self.series_info[LATE_USER_LOSS] = {
                "provenance": "measured", "source": "tm.emit(train_loss=...)",
                "note": f"emitted from step {self.steps} on, after the captured loss had points; "
                        "train_loss keeps the captured loss so that one series holds one quantity"}
            return LATE_USER_LOSS
        self._user_loss = True
        self.series_info[LOSS_SERIES] = {"provenance": "measured", "source": "tm.emit(train_loss=...)",
                                         "note": "the cell's own loss; the loss passed to backward is not recorded"}
        return LOSS_SERIES

