"""The step rule, written once: :class:`StepRecorder` owns what a counted optimizer step changes (its count, clock
mark, tokens per step and losses; docs/spec.md section 2; its steady cost: docs/architecture.md, "Hot path"). Every
source of steps calls :meth:`StepRecorder.step`; nothing else writes these fields.

Thread safety: the writing thread is lane 1's training thread (the probes' and the monitor's); ``steps`` and
``tokens`` are plain ints any thread may read; the step series takes its own lock for readers and trims.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmeter.core.scalars import ScalarReader, StepLoss
from trainmeter.core.series import Series, StepSeries

LOSS_SERIES = "train_loss"
LATE_USER_LOSS = "train_loss.emitted"  # tm.emit(train_loss=...) that began after captured points
MAX_PENDING_LOSSES = 4096


def _nothing() -> None:
    return None


class StepRecorder:
    """One run's step rule and the state it keeps (see the module docstring).

    Args:
        now: The clock read on the hot path (``time.perf_counter`` for the real clock: no Python frame).
        interval_s: Seconds between reports.
        series: ``series(name)`` returns the run's series of that name, made if new (the registry's).
        report: Called when a step finds the next report due (the reporter's ``maybe_report``).
        fault: Called with the exception of a step hook that raised (the dispatcher's ``step_fault``).
        guard: ``guard(key, fn)`` calls ``fn``, warning once on a fault (an ``at_step`` callback).
    """

    __slots__ = (
        "now", "interval_s", "steps", "tokens", "t0_s", "step_t_s", "step_series", "next_report_s",
        "count", "hook", "hook_at", "at_step", "_at_steps",
        "held_step", "held_t_s", "held_value", "tail", "inline", "loss_steps", "loss_times", "loss_values",
        "captured_series", "user_loss", "late_user_loss", "losses", "scalars",
        "_series", "_report", "_fault", "_guard",
    )

    def __init__(self, now: Callable[[], float], interval_s: float, *, series: Callable[[str], Series],
                 report: Callable[[], None], fault: Callable[[BaseException], None],
                 guard: Callable[..., Any]) -> None:
        self.now = now
        self.interval_s = interval_s
        self._series = series
        self._report = report
        self._fault = fault
        self._guard = guard
        self.hook: Callable[[], None] = _nothing  # the dispatcher's step hook (set_hook)
        self.count = self.step  # what the sources call: the rule, or for one step the overhead wing's timer
        self.new_run(0.0)

    def new_run(self, t0_s: float) -> None:
        """Start afresh at clock time ``t0_s`` (construction, and a forked child); the step hook stays."""
        self.steps = 0
        self.tokens = 0
        self.t0_s = t0_s
        self.step_t_s = 0.0  # run-clock seconds of the last counted step
        self.step_series = StepSeries("tokens_per_step")
        self.next_report_s = t0_s + self.interval_s  # clock seconds of the next report
        self.hook_at = 0 if self.hook is not _nothing else sys.maxsize  # the first step the hook runs at next
        self.at_step: int | None = None  # the next step with at_step callbacks
        self._at_steps: list[tuple[int, Callable[[], None]]] = []
        self.held_step = 0  # a loss read on the host, waiting for the next step: step, time, value
        self.held_t_s = 0.0
        self.held_value = 0.0
        self.tail = False  # the held loss is train_loss's open point (Series.open): a step closes it, opens its own
        # tail, and no loss queued nor read deferred: the next step may close and open points in place
        self.inline = False
        self.loss_steps: list[int] = []  # train_loss's columns while tail (Series.columns)
        self.loss_times: list[float] = []
        self.loss_values: list[float] = []
        self.captured_series: Series | None = None  # train_loss once a captured loss is in it
        self.user_loss = False  # the cell emits its own train_loss
        self.late_user_loss = False  # ... from after captured points on (train_loss.emitted)
        # closed step losses not yet in their series, in step order (beyond MAX_PENDING_LOSSES the oldest is left out)
        self.losses: deque[StepLoss] = deque(maxlen=MAX_PENDING_LOSSES)
        self.scalars = ScalarReader(self._no_inline)  # 0-d reads deferred until their device copy is done

    def _no_inline(self) -> None:  # a read was deferred: the next step polls it (the general path)
        self.inline = False

    def restart_clock(self, t0_s: float, first_report_s: float = math.inf) -> None:
        """The run's clock starts at ``t0_s`` (the run's start; a forked child's, its first report within
        ``first_report_s``)."""
        self.t0_s = t0_s
        self.next_report_s = t0_s + min(self.interval_s, first_report_s)

    def report_now(self) -> None:
        """Make the next step (or emit) boundary run the report (a noted SIGTERM, a control). Any thread."""
        self.next_report_s = float("-inf")

    def reported(self, now_s: float) -> None:
        """A report ended at clock ``now_s``: the next is an interval later."""
        self.next_report_s = now_s + self.interval_s

    def step(self, tokens: int, loss: StepLoss | None = None, value: float | None = None) -> None:
        """One optimizer step of lane 1 with ``tokens`` counted and its loss (docs/spec.md section 2): ``value`` read
        on the host (held until the next step, as train_loss's open point once it has a captured point: a steady
        step closes it and opens its own), or ``loss``, whose parts may still be read (queued in step order). Then
        the ``at_step`` callbacks due, the sampled step hook, the report once due. Training thread."""
        # hot path (docs/spec.md section 20): a counter, a clock read, an append, the previous step's loss
        self.steps = steps = self.steps + 1
        self.tokens += tokens
        clock = self.now  # a slot read, then a call: a method call of a slot is not specialized on CPython 3.11
        now = clock()
        self.step_t_s = t_s = now - self.t0_s
        step_series = self.step_series
        if tokens != step_series.tokens:  # a new tokens-per-step run: rare once the batch shape is steady
            step_series.set_tokens(tokens, steps)
        step_series.times.append(t_s)
        if self.inline and value is not None:
            self.loss_values.append(self.held_value)  # close the open point, open this step's
            self.loss_steps.append(steps)
            self.loss_times.append(t_s)
            self.held_step = steps
            self.held_value = value
        elif value is not None or loss is not None or self.held_step or self.losses or self.scalars.queue:
            self._step_losses(steps, t_s, loss, value)  # (an empty step with nothing held or queued: nothing to do)
        if steps == self.at_step:
            self._run_at_step()
        if steps >= self.hook_at:
            hook = self.hook  # (a slot read, then a call, as the clock's)
            try:
                hook()  # an extension's sampled on_step (the optimizer wing's), or the controls' trampoline
            except Exception as exc:
                self._fault(exc)
        if now >= self.next_report_s:
            self._report()

    def time_next_step(self, timer: Callable[[Callable[[], None]], None]) -> None:
        """Run the next step's rule through ``timer(run_step)``, which calls ``run_step()`` once between its own
        clock reads (the overhead wing's hook, docs/spec.md section 17). Training thread."""
        rule = self.step

        def timed(tokens: int, loss: StepLoss | None = None, value: float | None = None) -> None:
            self.count = rule
            timer(lambda: rule(tokens, loss, value))

        self.count = timed

    def set_hook(self, hook: Callable[[], None] | None, at: int) -> None:
        """Call ``hook`` after each counted step from step ``at`` on (``None``: none). Training thread."""
        self.hook = hook or _nothing
        self.hook_at = at if hook is not None else sys.maxsize

    def hook_next_at(self, step: int) -> None:
        """Call the step hook next at the first counted step ``>= step``."""
        self.hook_at = step

    def call_at(self, step: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` right after optimizer step ``step`` (once; a step already counted never comes)."""
        if step <= self.steps:
            return
        self._at_steps.append((step, fn))
        self.at_step = min(s for s, _ in self._at_steps)

    def _run_at_step(self) -> None:
        due = [fn for s, fn in self._at_steps if s == self.steps]
        self._at_steps = [(s, fn) for s, fn in self._at_steps if s > self.steps]
        self.at_step = min((s for s, _ in self._at_steps), default=None)
        for fn in due:
            self._guard("at-step", fn)

    def _step_losses(self, steps: int, t_s: float, loss: StepLoss | None, value: float | None) -> None:
        """Scalar reads and the step losses due at step ``steps``."""
        if self.scalars.queue:
            self.poll_scalars()
        if self.held_step:  # the previous step's loss: its step has passed
            self._release_held()
        if self.losses:
            self.flush_losses(steps)
        if value is not None:
            if self.losses:  # keep the order behind losses still being read
                self.add_loss(StepLoss.read(LOSS_SERIES, value), t_s)
            else:
                self._hold(steps, t_s, value)
        elif loss is not None:
            self.add_loss(loss, t_s)

    def _hold(self, steps: int, t_s: float, value: float) -> None:
        """Hold step ``steps``' loss until the next step: in train_loss's open point once that has captured points."""
        self.held_step = steps
        self.held_value = value
        series = self.captured_series
        if series is None or self.user_loss:
            self.held_t_s = t_s
            return
        self.loss_steps, self.loss_times, self.loss_values = series.columns()
        series.open(steps, t_s)
        self.tail = True
        self.inline = not self.losses and not self.scalars.queue

    def _release_held(self) -> None:  # into train_loss, or dropped when the cell emits its own
        held, self.held_step = self.held_step, 0
        if self.tail:
            self.tail = self.inline = False
            self.loss_values.append(self.held_value)  # the open point's value: it is in the series now
        elif not self.user_loss:
            (self.captured_series or self._captured()).append(held, self.held_t_s, self.held_value)

    def _captured(self) -> Series:
        self.captured_series = self._series(LOSS_SERIES)
        return self.captured_series

    def add_loss(self, loss: StepLoss, t_s: float | None = None) -> None:
        """Queue a closed step loss (at the current step) for its series. Training thread."""
        loss.step = self.steps
        loss.t_s = self.now() - self.t0_s if t_s is None else t_s
        self.inline = False  # the next step keeps the order behind it (the general path)
        self.losses.append(loss)

    def flush_losses(self, before_step: float) -> None:
        """Append ready step losses of steps before ``before_step`` to their series, in order."""
        held = self.held_step
        if held and held < before_step:  # older than anything queued after it
            self._release_held()
        losses = self.losses
        while losses and losses[0].ready and losses[0].step < before_step:
            loss = losses.popleft()
            if loss.series == LOSS_SERIES and self.user_loss:
                continue  # the cell emits its own train_loss: it is the headline
            number = loss.value()
            if number is not None:
                if loss.series == LOSS_SERIES:
                    if self.tail:
                        self._release_held()
                    self.captured_series or self._captured()
                self._series(loss.series).append(loss.step, loss.t_s, number)

    def pending_losses(self) -> bool:
        return bool(self.losses or self.held_step)

    def poll_scalars(self) -> None:
        """Record the deferred reads whose copies completed (step losses' parts, emitted values)."""
        for (name, step, at_s), number in self.scalars.poll():  # type: ignore[misc]
            if type(name) is StepLoss:
                name.resolve(step, at_s, number)  # (step loss, part index, field)
            else:
                self._series(name).append(step, at_s, number)

    def user_loss_name(self) -> tuple[str, bool]:
        """Where ``tm.emit(train_loss=...)`` goes while the headline is not the cell's, and whether that name is new:
        the headline, unless captured points are already there (then ``train_loss.emitted``)."""
        if self.late_user_loss:
            return LATE_USER_LOSS, False
        if self.captured_series is not None:
            self.late_user_loss = True
            return LATE_USER_LOSS, True
        self.user_loss = True
        return LOSS_SERIES, True
