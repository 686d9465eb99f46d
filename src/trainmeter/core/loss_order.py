"""Loss ordering: a step's loss reaches its series after the next step, behind losses still being read."""

from __future__ import annotations

from typing import Any

from trainmeter.core.hot_state import HotState
from trainmeter.core.scalars import StepLoss
from trainmeter.core.series import Series

LOSS_SERIES = "train_loss"
LATE_USER_LOSS = "train_loss.emitted"  # tm.emit(train_loss=...) that began after captured points
MAX_PENDING_LOSSES = 4096


class LossOrder:
    """The held and pending step losses (a part of :class:`~trainmeter.core.monitor.Monitor`). Training thread."""

    series_info: dict[str, dict[str, Any]]
    hot: HotState  # the held loss, the pending losses, the captured series

    def _step_losses(self, steps: int, t_s: float, loss: StepLoss | None, loss_value: float | None) -> None:
        """Scalar reads and the step losses due at step ``steps`` (training thread)."""
        hot = self.hot
        if hot.scalars.queue:
            self._poll_scalars(t_s)
        if hot.held_step:  # the previous step's loss, read on the host: its step has passed (inline _flush_losses)
            self._release_held()
        if hot.losses:
            self._flush_losses(steps)
        if loss_value is not None:
            if hot.losses:  # keep the order behind losses still being read
                self.add_loss(StepLoss.read(LOSS_SERIES, loss_value), t_s)
            else:
                self._hold(steps, t_s, loss_value)
        elif loss is not None:
            self.add_loss(loss, t_s)

    def _hold(self, steps: int, t_s: float, value: float) -> None:
        """Hold step ``steps``' loss read on the host until the next step (none is held; training thread).

        Before train_loss has a captured point it waits in the hot state (a ``tm.emit(train_loss=...)``
        before the next step still makes the cell's own loss the headline and drops it); after, it is
        the series' open point (``Series.open``), which the next step closes with its value.
        """
        hot = self.hot
        hot.held_step = steps
        hot.held_value = value
        series = hot.captured_series
        if series is None or hot.user_loss:
            hot.held_t_s = t_s
            return
        hot.loss_steps, hot.loss_times, hot.loss_values = series.columns()
        series.open(steps, t_s)
        hot.tail = True
        hot.inline = not hot.losses and not hot.scalars.queue

    def _release_held(self) -> None:
        """Put the held loss in train_loss, or drop it when the cell emits its own (training thread)."""
        hot = self.hot
        held, hot.held_step = hot.held_step, 0
        if hot.tail:
            hot.tail = hot.inline = False
            hot.loss_values.append(hot.held_value)  # Series.close of the open point
        elif not hot.user_loss:
            (hot.captured_series or self._captured_loss_series()).append(held, hot.held_t_s, hot.held_value)

    def _captured_loss_series(self) -> Series:
        """The train_loss series, remembered as holding captured points (training thread)."""
        series = self.hot.captured_series = self._series(LOSS_SERIES)
        return series

    def add_loss(self, loss: StepLoss, t_s: float | None = None) -> None:
        """Queue a closed step loss (at the current step) for its series (training thread)."""
        hot = self.hot
        loss.step = hot.steps
        loss.t_s = hot.now() - hot.t0_s if t_s is None else t_s
        loss.closed = True
        hot.inline = False  # the next step keeps the order behind it (the general path)
        if len(hot.losses) >= MAX_PENDING_LOSSES:
            hot.losses.popleft()  # its reads never completed: leave it out
        hot.losses.append(loss)

    def _flush_losses(self, before_step: float) -> None:
        """Append ready step losses of steps before ``before_step`` to their series, in order."""
        hot = self.hot
        held = hot.held_step
        if held and held < before_step:  # older than anything queued after it
            self._release_held()
        losses = hot.losses
        while losses and losses[0].ready and losses[0].step < before_step:
            loss = losses.popleft()
            if loss.series == LOSS_SERIES and hot.user_loss:
                continue  # the cell emits its own train_loss: it is the headline
            value = loss.value()
            if value is not None:
                if loss.series == LOSS_SERIES:
                    if hot.tail:  # its open point is last: a point appended goes after it (not met: a step
                        self._release_held()  # that queues a loss first closes the open point)
                    hot.captured_series or self._captured_loss_series()
                self._series(loss.series).append(loss.step, loss.t_s, value)

    def _user_loss_name(self) -> str:
        """Where ``tm.emit(train_loss=...)`` goes: the headline, unless captured points are already there."""
        if self._late_user_loss:
            return LATE_USER_LOSS
        if self.hot.captured_series is not None:
            self._late_user_loss = True
            self.series_info[LATE_USER_LOSS] = {
                "provenance": "measured", "source": "tm.emit(train_loss=...)",
                "note": f"emitted from step {self.hot.steps} on, after the captured loss had points; "
                        "train_loss keeps the captured loss so that one series holds one quantity"}
            return LATE_USER_LOSS
        self.hot.user_loss = True
        self.series_info[LOSS_SERIES] = {"provenance": "measured", "source": "tm.emit(train_loss=...)",
                                         "note": "the cell's own loss; the loss passed to backward is not recorded"}
        return LOSS_SERIES

