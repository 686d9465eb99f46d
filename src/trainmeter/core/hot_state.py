"""The hot state: everything a steady optimizer step reads or writes, on one ``__slots__`` object.

The monitor's step (:meth:`~trainmeter.core.monitor.Monitor.on_step_read`) and the
probes' wrappers (the watched call, ``autograd.backward``, the optimizer step hook)
close over one :class:`HotState`; everything else of the run (series registry,
reports, faults, discovery) is cold and lives on its owners. A slot read costs what
an instance-dict read costs, without the dict. Training thread only, except where a
field says otherwise.
"""

from __future__ import annotations

import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmeter.core.scalars import ScalarReader, StepLoss
from trainmeter.core.series import Series, StepSeries


class _Nobody:
    """What the call wrapper's root reference returns while no root is counted: never a module."""

    __slots__ = ("__weakref__",)


_NOBODY = _Nobody()
NO_ROOT = weakref.ref(_NOBODY)  # hot.fast_ref while no root's calls take the fast path


class HotState:
    """The per-step state of one run: the monitor's counters and held loss, the probes' fast flags.

    Two groups, each set by one method, so that no field can be set at construction and forgotten
    elsewhere: :meth:`new_run` (counters, clock mark, series, losses, queues, report and hook
    times; also what a forked child gets afresh) and :meth:`new_probe_state` (the probes' fast
    flags, the last batch signature and the step's loss parts).

    Args:
        now: The clock read on the hot path (``time.perf_counter`` for the real clock: no Python frame).
        interval_s: Seconds between reports.
    """

    __slots__ = (
        # the monitor's step
        "now", "interval_s", "steps", "tokens", "t0_s", "step_series", "next_report_s",
        "step_read", "step_hook", "hook_at", "at_step",
        # loss ordering and queued values (the step's slow-path triggers)
        "slow_steps", "held_step", "held_t_s", "held_value", "tail", "inline", "loss_steps", "loss_times", "loss_values", "captured_series",
        "user_loss", "losses", "queued", "scalars",
        # the probes: fast flags, last batch signature, the step's calls and loss parts
        "primary", "fast_ref", "call_impl", "fast_backward", "steady", "backward_on", "in_backward", "depth", "calls",
        "pending_tokens",
        "last_type", "last_shape", "last_dtype", "last_tokens", "fast_calls",
        "fast_parts", "fast_sum", "fast_divided", "fast_first", "fast_steps",
    )

    def __init__(self, now: Callable[[], float], interval_s: float) -> None:
        self.now = now
        self.interval_s = interval_s
        # what the probes call for a step whose loss was read (Monitor.on_step_read, set by the monitor; the
        # overhead wing's timed wrapper for one step in 64 or more): a slot read, where a method of the monitor is a
        # lookup
        self.step_read: Callable[[int, float], None] | None = None
        self.step_hook: Callable[[], None] | None = None  # set by the dispatcher (Monitor.set_step_hook)
        self.at_step: int | None = None  # the next step with Monitor.at_step callbacks
        self.new_run(0.0)
        self.new_probe_state()

    def new_run(self, t0_s: float) -> None:
        """Start the run's step state afresh at clock time ``t0_s`` (construction, and a forked child).

        The step hook stays; it is called next at the first step (it moves its own next call).
        """
        self.steps = 0
        self.slow_steps = 0  # steps counted by Monitor.on_step or on_step_read (the others: inline in the step hook)
        self.tokens = 0
        self.t0_s = t0_s
        self.step_series = StepSeries("tokens_per_step")
        self.next_report_s = t0_s + self.interval_s  # clock seconds of the next report
        self.hook_at = 0 if self.step_hook is not None else sys.maxsize  # the first step the hook runs at next
        self.held_step = 0  # a captured loss read on the host, waiting for the next step: step, time, value
        self.held_t_s = 0.0
        self.held_value = 0.0
        # the held loss as train_loss's open point (Series.open: its step and time appended, its value held_value)
        # instead of in held_t_s; then a step closes it and opens its own with three list appends
        self.tail = False
        # tail, and no loss or read pending: the step hook's steady step may run the step inline (cleared by
        # whatever queues a loss or defers a read, and when the open point closes)
        self.inline = False
        self.loss_steps: list[int] = []  # the captured series' columns while tail (Series.columns)
        self.loss_times: list[float] = []
        self.loss_values: list[float] = []
        self.captured_series: Series | None = None  # train_loss once a captured loss is in it
        self.user_loss = False  # the cell emits its own train_loss
        self.losses: deque[StepLoss] = deque()  # closed step losses not yet in their series, in step order
        # values tm.emit'ted from other threads, waiting for the training thread (appended by any thread)
        self.queued: deque[tuple[dict[str, Any], int]] = deque()
        self.scalars = ScalarReader(self._no_inline)  # 0-d reads deferred until their device copy is done

    def _no_inline(self) -> None:
        """A read was deferred: the next step polls it (the general path)."""
        self.inline = False

    def new_probe_state(self) -> None:
        """The probes' fast flags and the step's calls and loss parts, as before any call was seen."""
        self.primary: Any = None  # a weak reference to the primary optimizer (TorchProbes._primary), or None
        # the hot paths' flags, recomputed by TorchProbes._refresh_fast whenever one of their inputs changes:
        # a weak reference to the root while its positional batches are counted like the last one (else
        # NO_ROOT: a call, then an identity test, costs less than comparing an id, a large int, on CPython
        # 3.11), torch's Module._call_impl while the fast call may call it itself (else None), whether a
        # 0-d CPU loss may be read at backward, and whether a step may take the short path
        self.fast_ref: Callable[[], Any] = NO_ROOT
        self.call_impl: Callable[..., Any] | None = None
        self.fast_backward = False
        self.steady = False
        self.backward_on = False  # loss capture installed and not disabled by a fault
        self.in_backward = False
        self.depth = 0  # nesting of watched calls (the outermost one counts)
        self.calls = 0  # calls of the root since the last step
        self.pending_tokens = 0  # tokens counted since the last step
        # the last counted positional batch of the root (the call wrapper's fast path): type, shape, dtype, count
        self.fast_calls = False
        self.last_type: Any = None
        self.last_shape: Any = None
        self.last_dtype: Any = None
        self.last_tokens = 0
        self.clear_fast_loss()
        self.fast_steps = 0  # steps whose loss was read on the fast paths and that went to hot.step_read (the
        # ones run inline in the step hook are hot.steps - hot.slow_steps)

    def clear_fast_loss(self) -> None:
        """Forget the loss parts read on the backward fast path (a step closed, a fault, a stop)."""
        # the step's loss while every part was a 0-d CPU tensor read at once (the backward fast path)
        self.fast_parts = 0
        self.fast_sum = 0.0
        self.fast_divided = True  # every part after the first was divided (folded in from the second part on)
        # the first part's loss tensor, held from its backward to the step (or the second part, which reads
        # its grad_fn): a single-part step never reads a grad_fn
        self.fast_first: Any = None
