"""The monitor: one run's owner, composing its parts; fed by sources and read by sinks.

Sources (torch probes, ``tm.emit``, ``tm.phase``, background samplers) write
into the :class:`Monitor`; sinks (run log, text line, passport, widget) read
it. Reports happen on the training thread at step or emit boundaries once
``interval_s`` has passed (docs/spec.md section 3: snapshot first, then sample and write, and
the report's own cost is credited to ``reporting``). Nothing here raises into
the user's loop: faults warn once and degrade.

The parts, each in its module: :mod:`~trainmeter.core.lifecycle` (start, finish, SIGTERM),
:mod:`~trainmeter.core.emits` (``tm.emit`` checks, the cross-thread queue, the series
registry), :mod:`~trainmeter.core.loss_order` (held and pending step losses),
:mod:`~trainmeter.core.reports` (interval and final reports), :mod:`~trainmeter.core.faults`
(warn once, guard). This module keeps the active-run slot, the constructor and the step.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.core.controls import Controls
from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.emits import DEFAULT_MAX_SERIES, Emits
from trainmeter.core.faults import Faults, MonitorWarning
from trainmeter.core.hot_state import HotState
from trainmeter.core.lane_steps import LaneSteps
from trainmeter.core.lifecycle import Lifecycle
from trainmeter.core.loss_order import LossOrder
from trainmeter.core.memory import MemoryProbe, MemoryReading, ProcessMemory
from trainmeter.core.phases import PhaseClock, cuda_synchronize
from trainmeter.core.reports import Reports
from trainmeter.core.scalars import ScalarReader, StepLoss
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.side_emits import SideEmits
from trainmeter.core.sink import RecordSink
from trainmeter.core.terminate import TerminateHandler
from trainmeter.core.throughput import IntervalSummary, SessionSummary

__all__ = ["Monitor", "MonitorWarning", "active", "save_unsaved"]

_ACTIVE: Monitor | None = None
_UNSAVED: Monitor | None = None  # the last run whose passport could not be written (a full disk at its end)
_ACTIVE_LOCK = threading.Lock()
_PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")


def save_unsaved(say: Callable[[str], None] | None = None) -> Path | None:
    """Write the passport of the last run whose passport could not be written; returns its folder.

    ``None`` when no run is waiting or the disk still refuses (the run stays waiting).
    Any thread; never raises.
    """
    global _UNSAVED
    run = _UNSAVED
    if run is None or not run.retry_passport():
        return None
    _UNSAVED = None
    if say is not None and run._record is not None:
        try:
            say(run._record.closing_line(run))
        except Exception:
            pass
    return run.run_dir


def active() -> Monitor | None:
    """Return the monitor of the run in progress, or ``None``. Any thread."""
    return _ACTIVE


class Monitor(Lifecycle, Emits, SideEmits, LossOrder, Reports, LaneSteps, Faults):
    """One monitored run.

    Args:
        options: Validated options (``trainmeter.options.MonitorOptions``: ``name``,
            ``run_root``, ``interval_s``, ``to_dict()`` and the wings' fields).
        clock: Monotonic clock (injected in tests).
        synchronize: Called at phase transitions; defaults to a CUDA sync when
            CUDA is initialised, nothing otherwise.
        out: Where text lines go (``sys.stdout`` by default).
        text: Whether to print a text line each report.
        extensions: The wings (docs/contracts/EXTENSIONS.md), ordered by their ``requires``.
        record: The saved record (run folder, run log, text line, passport);
            ``None`` keeps the run in memory only. ``make_monitor`` passes one.
        cuda_memory: Factory of the CUDA allocator reader for memory samples
            (``trainmeter.gpu.cuda_memory.CudaMemoryMonitor``), or ``None``.
    """

    def __init__(
        self,
        options: Any,
        *,
        clock: Clock | None = None,
        synchronize: Callable[[], None] | None = None,
        out: TextIO | None = None,
        text: bool = True,
        probes: bool = True,
        extensions: list[Any] | None = None,
        record: RecordSink | None = None,
        cuda_memory: Callable[[], Any] | None = None,
    ) -> None:
        self.options = options
        self.clock: Clock = clock or MonotonicClock()
        # hot path: read time.perf_counter directly (no Python frame) when the clock is the real one
        self._now: Callable[[], float] = time.perf_counter if isinstance(self.clock, MonotonicClock) else self.clock
        self._interval_s = options.interval_s
        self._synchronize = synchronize or cuda_synchronize()
        # what a steady step touches: the probes' wrappers and the wings' step hooks read it (not the properties)
        self.hot = HotState(self._now, self._interval_s)
        self.hot.step_read = self.on_step_read
        self.out = out
        self.text = text
        self.token_unit = "tokens"
        self.run_dir: Path | None = None
        self.ended_at: str | None = None
        self.error: str | None = None
        self.exit_code: int | str | None = None  # a failed run's SystemExit code
        self.text_line = ""
        self._memory_probe: MemoryProbe | None = None
        self._record = record
        self._cuda_memory = cuda_memory
        self._probes: Any = None
        self._want_probes = probes
        self.controls = Controls(self)  # stop/checkpoint requests, honoured at a step boundary (core/controls.py)
        self.dispatch = Dispatcher(extensions or [], self.warn_once)  # the extensions' events, in order
        self._finished = False
        self._at_steps: list[tuple[int, Callable[[], None]]] = []  # (step, callback) waiting; hot.at_step: the next
        self._step_many = False  # hot.step_hook is the dispatcher's fan-out over several extensions
        self._owner_ident = threading.get_ident()  # the recording thread (set again at start)
        self._max_series = int(getattr(options, "max_series", DEFAULT_MAX_SERIES) or DEFAULT_MAX_SERIES)
        self._started: list[Any] = []  # 'record' once its open was attempted (the extensions: the dispatcher)
        self._finish_done: set[str] = set()
        self._terminate: TerminateHandler | None = None
        self._heartbeat: Any = None  # core.heartbeat.Heartbeat while the run is live
        self._new_run_state()

    def _new_run_state(self) -> None:
        """The run's own state, as at construction: set here only, so a forked child gets all of it afresh.

        The hot part is :attr:`hot` (:meth:`HotState.new_run`, in place: the probes' wrappers close over it).
        """
        self.hot.new_run(0.0)
        self._new_lanes()
        self._report_lock = threading.Lock()  # one reporting thread at a time, never waited for (core/reports.py)
        self.phases = PhaseClock(self.clock, self._synchronize)
        self.status = "starting"
        self.started_at: str | None = None
        self.series: dict[str, Series] = {}
        self.series_info: dict[str, dict[str, Any]] = {}  # series name -> its source and provenance
        self._series_lock = threading.Lock()
        self._readers: list[dict[str, int]] = []
        self.model_ref: weakref.ReferenceType[Any] | None = None
        self.interval: IntervalSummary | None = None
        self.session: SessionSummary | None = None
        self.memory: MemoryReading | None = None
        self.process_memory = ProcessMemory()  # posted by the node sampler's thread (docs/spec.md section 18)
        self.reports = 0
        self._window_start_tokens = 0  # tokens and steps when the report window began
        self._window_start_steps = 0
        self._phase_depth = 0
        self._phase_started_s = 0.0
        self._phase_name = ""
        self._phase_resume = False
        self._late_user_loss = False
        self.warnings: list[str] = []
        self.warnings_suppressed = 0
        self._warned: set[str] = set()
        self._said_warnings: set[str] = set()
        self._new_side_emits()  # the folding thread and its counts (queue_dropped)
        self._user_series = 0
        self.series_dropped = 0
        self.series_dropped_names: list[str] = []
        self._dropped_seen: set[str] = set()

    def fresh_state_for_child(self) -> None:
        """Give a forked child's inherited run state of its own: counters, series, held and pending losses,
        queued emits, provenance, warnings and clocks start afresh, running from now (docs/spec.md section 19).

        The configuration, the record, the extensions and the probes' patches stay. Training thread of the child.
        """
        training = self.phases.training
        self._new_run_state()
        self.status = "running"
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        hot = self.hot
        hot.t0_s = self.phases.begin()
        hot.next_report_s = hot.t0_s + self._interval_s
        if training:
            self.phases.resume_train()

    # -- the hot state, read by sinks and extensions -------------------------------------
    @property
    def steps(self) -> int:
        """Optimizer steps counted so far: lane 1's primary optimizer's plus every other training thread's lane
        (docs/spec.md section 2, "Threads"). Any thread (a read)."""
        return self.hot.steps + self.lanes_steps() if self.lanes else self.hot.steps

    @property
    def tokens(self) -> int:
        """Tokens (or samples, see ``token_unit``) counted so far, summed over the lanes. Any thread (a read)."""
        return self.hot.tokens + self.lanes_tokens() if self.lanes else self.hot.tokens

    @property
    def step_series(self) -> StepSeries:
        """Tokens per step and the time of each step. Any thread (its reads take its lock)."""
        return self.hot.step_series

    # -- sources ---------------------------------------------------------------------
    def set_model(self, module: Any, token_unit: str) -> None:
        """Record the trained root module (from the probes) and the token unit."""
        self.model_ref = weakref.ref(module)
        self.token_unit = token_unit

    def declare_model(self, module: Any) -> None:
        """Name the trained module explicitly instead of discovering it."""
        if self._probes is not None:
            self._guard("declare-model", self._probes.declare_root, module)

    @property
    def params(self) -> dict[str, Any]:
        """Parameter counts of the trained model (empty until found)."""
        return dict(self._probes.params) if self._probes is not None else {}

    @property
    def probes(self) -> Any:
        """The torch probes, or ``None`` without torch."""
        return self._probes

    @property
    def record_sink(self) -> Any:
        """The run's record sink (``core.sink.RecordSink``), or ``None`` for a run kept in memory."""
        return self._record

    def replace_record_sink(self, sink: Any) -> None:
        """Record to ``sink`` from now on (a forked child's own rank record, docs/spec.md section 19)."""
        self._record = sink

    def locks(self) -> list[Any]:
        """The run's own locks (the series registry's, each series'), held around a fork (docs/spec.md section 19)."""
        return [self._series_lock, *(s.lock for s in (self.step_series, *self.series.values()))]

    @property
    def scalar_reader(self) -> ScalarReader:
        """The reader of 0-d values (the probes read losses through it). Training thread."""
        return self.hot.scalars

    def on_step(self, tokens: int, loss: StepLoss | None = None, *, loss_value: float | None = None) -> None:
        """One optimizer step of the primary optimizer (training thread).

        ``loss`` is the step's captured loss (the values passed to backward since the
        previous optimizer step); it reaches its series once the next step (or the end)
        has come, so a ``tm.emit(train_loss=...)`` made right after this step is seen first.
        ``loss_value`` is the same for a captured loss already read (a CPU loss: the probes'
        fast path), held in three attributes instead of a queued object, with the same timing.
        """
        # hot path (docs/spec.md section 20): a counter, a clock read, an append (and the previous step's loss)
        hot = self.hot
        hot.steps = steps = hot.steps + 1
        hot.slow_steps += 1
        hot.tokens += tokens
        now = hot.now()
        t_s = now - hot.t0_s
        if tokens != hot.step_series.tokens:  # a new tokens-per-step run: rare once the batch shape is steady
            hot.step_series.set_tokens(tokens)
        hot.step_series.times.append(t_s)
        self._step_losses(steps, t_s, loss, loss_value)
        if steps == hot.at_step:
            self._run_at_step()
        if steps >= hot.hook_at:
            try:
                hot.step_hook()  # type: ignore[misc]  # an extension's sampled on_step (the optimizer wing's)
            except Exception as exc:
                self.dispatch.step_fault(exc)
        if now >= hot.next_report_s:
            self._maybe_report()

    def on_step_read(self, tokens: int, loss_value: float) -> None:
        """:meth:`on_step` for a step whose loss was already read on the host (the probes' fast path).

        The same effects as ``on_step(tokens, loss_value=loss_value)`` with fewer operations:
        while no read is pending and no loss of the user's is seen, the previous step's loss goes
        to ``train_loss`` and this one is held (training thread).
        """
        hot = self.hot
        hot.steps = steps = hot.steps + 1
        hot.slow_steps += 1
        hot.tokens += tokens
        clock = hot.now  # a slot read, then a call (a method call of a slot is not specialized on CPython 3.11)
        now = clock()
        t_s = now - hot.t0_s
        if tokens != hot.step_series.tokens:
            hot.step_series.set_tokens(tokens)
        hot.step_series.times.append(t_s)
        if hot.tail and not hot.losses and not hot.scalars.queue:  # close the open point, open this step's
            hot.loss_values.append(hot.held_value)  # (as the step hook's inline step does, core/wrappers.py)
            hot.loss_steps.append(steps)
            hot.loss_times.append(t_s)
            hot.held_step, hot.held_value, hot.inline = steps, loss_value, True  # the next steady step: inline
        else:
            self._step_losses(steps, t_s, None, loss_value)
        if steps == hot.at_step:
            self._run_at_step()
        if steps >= hot.hook_at:
            try:
                hot.step_hook()  # type: ignore[misc]
            except Exception as exc:
                self.dispatch.step_fault(exc)
        if now >= hot.next_report_s:
            self._maybe_report()

    # -- extensions ----------------------------------------------------------------------
    @property
    def extensions(self) -> tuple[Any, ...]:
        """The run's extensions in their computed order (read-only; events go through :attr:`dispatch`)."""
        return self.dispatch.extensions

    def extension(self, name: str) -> Any:
        """The view the extension ``name`` publishes (``ComputeView``, ``GpuView``), or ``None``. Any thread."""
        return self.dispatch.view(name)

    def set_step_hook(self, fn: Callable[[], None] | None, *, many: bool = False, at: int = 0) -> None:
        """The dispatcher's: call ``fn`` after each counted step from step ``at`` (``None``: no call).

        ``fn`` is one extension's own ``on_step`` (no frame in between), or with ``many`` the
        dispatcher's fan-out. A fault is handed to ``dispatch.step_fault``. Training thread.
        """
        self._step_many = many
        self.controls.set_hook(fn, at)  # while a control request is pending, its trampoline calls fn after it

    def next_step_hook_at(self, step: int, extension: Any = None) -> None:
        """Call ``extension``'s ``on_step`` next at the first counted step ``>= step`` (so a sampling extension
        costs one integer compare on the steps it skips). Training thread."""
        if self.hot.step_hook is None or self._step_many:
            self.hot.hook_at = self.dispatch.schedule(extension, step)
        else:
            self.hot.hook_at = step

    def elapsed_s(self) -> float:
        """Seconds since the session began (0 before). Any thread."""
        return self.phases.session_elapsed_s(self.clock())

    def enter_phase(self, name: str) -> None:
        """Pause training and start crediting ``name`` (outermost phase wins)."""
        self._phase_depth += 1
        if self._phase_depth > 1:
            return
        self._phase_name = name
        self._phase_resume = self.phases.training
        self.phases.pause_train()
        self._phase_started_s = self.clock()
        self.dispatch.phase(name, "begin", self.phases.session_elapsed_s(self._phase_started_s))

    def exit_phase(self) -> None:
        """Credit the phase opened by :meth:`enter_phase` and resume training (no-op when none is open)."""
        if self._phase_depth == 0:
            return
        self._phase_depth -= 1
        if self._phase_depth:
            return
        self.phases.finish_phase(self._phase_name, self._phase_started_s)
        if self._phase_resume and not self._finished:
            self.phases.resume_train()
        self.dispatch.phase(self._phase_name, "end", self.elapsed_s())

    def carve(self, phase: str, seconds: float) -> None:
        """Move host-measured ``seconds`` of training time to ``phase`` (no sync)."""
        if self._phase_depth == 0:
            self.phases.carve(phase, seconds)

    def at_step(self, step: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the training thread right after optimizer step ``step`` (once; a step already
        counted never comes). Several callbacks may wait; the hot path compares one integer."""
        if step <= self.hot.steps:
            return
        self._at_steps.append((step, fn))
        self.hot.at_step = min(s for s, _ in self._at_steps)

    def _run_at_step(self) -> None:
        steps = self.hot.steps
        due = [fn for s, fn in self._at_steps if s == steps]
        self._at_steps = [(s, fn) for s, fn in self._at_steps if s > steps]
        self.hot.at_step = min((s for s, _ in self._at_steps), default=None)
        for fn in due:
            self._guard("at-step", fn)

    def add_reader(self) -> dict[str, int]:
        """Register a series reader; returns its cursor map (name -> position)."""
        cursor: dict[str, int] = {}
        self._readers.append(cursor)
        return cursor

