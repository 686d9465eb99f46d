"""The monitor: one run of parts that each own their state (docs/architecture.md), and the active-run slot."""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection
from contextlib import suppress
from operator import attrgetter
from pathlib import Path
from typing import Any, TextIO

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.core.context import RunContext
from trainmeter.core.controls import Controls
from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.emits import Emitter
from trainmeter.core.faults import Faults, MonitorWarning
from trainmeter.core.fork_locks import fresh_in_child
from trainmeter.core.lanes import LaneRecord, Lanes
from trainmeter.core.lifecycle import Lifecycle
from trainmeter.core.memory import ProcessMemory
from trainmeter.core.phases import PhaseClock, PhaseSpans, cuda_synchronize
from trainmeter.core.reports import Reporter
from trainmeter.core.scalars import StepLoss
from trainmeter.core.series_registry import DEFAULT_MAX_SERIES, SeriesRegistry
from trainmeter.core.sink import RecordSink
from trainmeter.core.steps import StepRecorder

__all__ = ["Monitor", "MonitorWarning", "active", "rehome_in_child", "save_unsaved"]

_ACTIVE: Monitor | None = None
_UNSAVED: Monitor | None = None  # the last run whose passport could not be written (a full disk at its end)
_ACTIVE_LOCK = threading.Lock()
fresh_in_child(globals(), "_ACTIVE_LOCK")  # a forked child makes its own (core/fork_locks.py)


def rehome_in_child(make_record: Callable[[], RecordSink], drop: Collection[str], first_report_s: float
                    ) -> Monitor | None:
    """In a forked child, make the inherited active run its own; the run, or ``None`` (then none is active)."""
    global _ACTIVE
    run = _ACTIVE
    if run is None:
        return None
    try:
        run.rehome_in_child(make_record(), drop, first_report_s)
        return run
    except Exception:
        _ACTIVE = None
        return None


def save_unsaved(say: Callable[[str], None] | None = None) -> Path | None:
    """Write the passport the last run could not write; its folder, or ``None``. Never raises."""
    global _UNSAVED
    run = _UNSAVED
    if run is None or not run.lifecycle.retry_passport():
        return None
    _UNSAVED = None
    if say is not None and run.record_sink is not None:
        with suppress(Exception):
            say(run.record_sink.closing_line(run.context))
    return run.run_dir


def active() -> Monitor | None:
    """Return the monitor of the run in progress, or ``None``. Any thread."""
    return _ACTIVE


class Monitor:
    """One monitored run.

    Args:
        options: Validated options (``trainmeter.options.MonitorOptions``).
        clock: Monotonic clock (injected in tests).
        synchronize: Called at phase transitions; defaults to a CUDA sync when CUDA is initialised.
        out: Where text lines go (``sys.stdout`` by default).
        text: Whether to print a text line each report.
        extensions: The wings; they see the run through :attr:`context`, never this object.
        record: The saved record; ``None`` keeps the run in memory only.
        cuda_memory: Factory of the CUDA allocator reader for memory samples, or ``None``.
        finish_imports: Imports what the passport's build needs, on the training thread before the worker builds it.
    """

    def __init__(self, options: Any, *, clock: Clock | None = None, synchronize: Callable[[], None] | None = None,
                 out: TextIO | None = None, text: bool = True, probes: bool = True,
                 extensions: list[Any] | None = None, record: RecordSink | None = None,
                 cuda_memory: Callable[[], Any] | None = None, finish_imports: Callable[[], None] | None = None
                 ) -> None:
        self.options = options
        self.clock: Clock = clock or MonotonicClock()
        self._synchronize = synchronize or cuda_synchronize()
        self.text = text
        self._token_unit: str | None = None
        self.model_ref: weakref.ReferenceType[Any] | None = None
        self.record_sink = record  # the run's record (core/sink.py), or None for a run kept in memory
        self.faults = Faults(out)
        self.dispatch = Dispatcher(extensions or [], self.faults.warn_once, clock=self.clock)  # the wings' events
        self.controls = Controls(self)  # stop/checkpoint requests, honoured at a step boundary (core/controls.py)
        self.lifecycle = Lifecycle(self, finish_imports, probes=probes, cuda_memory=cuda_memory)
        self.reporter = Reporter(self)
        # hot path: read time.perf_counter directly (no Python frame) when the clock is the real one
        now = time.perf_counter if isinstance(self.clock, MonotonicClock) else self.clock
        max_series = int(getattr(options, "max_series", DEFAULT_MAX_SERIES) or DEFAULT_MAX_SERIES)
        self.registry = SeriesRegistry(self.faults.warn_once, max_series, lambda: self.steps_state.step_series)
        self.maybe_report = report = self.reporter.maybe_report  # at a step or emit boundary. Training thread
        # the probes' wrappers close over the step rule: it is made once and started afresh in place
        self.steps_state = StepRecorder(now, options.interval_s, series=self.registry.get, report=report,
                                        fault=self.dispatch.step_fault, guard=self.faults.guard)
        self.emitter = Emitter(self.registry, self.steps_state, self.faults.warn_once, report)
        self.lanes = Lanes(self.steps_state, self.registry, report)
        # the parts' own methods, bound as they are (each part is made once; their docstrings say the rest)
        self.warn_once = self.faults.warn_once  # once per key; kept for the passport. Any thread
        self.guard = self.faults.guard  # call fn; on a fault warn once and return None
        self.record = self.emitter.record  # named scalars at a step (tm.emit, taps). Any thread
        self.add_reader = self.registry.add_reader  # a series reader's cursor map
        self.locks = self.registry.locks  # the run's own locks, held around a fork (docs/spec.md section 19)
        self.extension = self.dispatch.view  # the view the wing `name` publishes, or None. Any thread
        self.at_step = self.steps_state.call_at  # fn right after optimizer step `step`, once. Training thread
        self.set_run_dir = self.lifecycle.set_run_dir  # the run folder the record sink made
        # print the text line each report, or not (a live widget shows it; a rank other than 0 stays quiet)
        self.set_text = functools.partial(setattr, self, "text")
        # what a counted batch holds: tokens or samples (the probes, at each new kind of batch)
        self.set_token_unit = functools.partial(setattr, self, "_token_unit")
        self.finish = self.lifecycle.finish  # end the run with a status (and the error). Training thread
        self.report_now = functools.partial(self.reporter.report, False)  # whatever the interval (tests; a control)
        self._new_clocks()
        self.context = RunContext(self)  # all that wings and sinks see of the run (docs/contracts/EXTENSIONS.md)

    def _new_clocks(self) -> None:
        self.phases = PhaseClock(self.clock, self._synchronize)
        self.spans = PhaseSpans(self.phases, self.clock, self.dispatch.phase, lambda: self.lifecycle.finished)
        self.process_memory = ProcessMemory()  # posted by the node sampler's thread (docs/spec.md section 18)

    def rehome_in_child(self, record: RecordSink, drop: Collection[str], first_report_s: float) -> None:
        """Make the run inherited by a forked child its own (docs/spec.md section 19): ``record`` its record, the
        wings ``drop`` left out, every part fresh, the first report within ``first_report_s``."""
        worker = self.open_worker
        torn = worker.reset_in_child() if worker is not None else None
        with suppress(Exception):  # the parent's events.jsonl: closed, unwritten; the child runs on without it anyway
            getattr(self.record_sink, "abandon_in_child", lambda: None)()
        self.dispatch.drop(drop)
        self.record_sink = record
        self.text = False
        self.faults.new_run(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (lives as long as the child)
        training = self.phases.training
        self.registry.new_run()  # every part's run state afresh, as at construction
        self.steps_state.new_run(0.0)
        self.emitter.new_run(threading.get_ident())
        self.lanes.new_run()
        self.reporter.new_run()
        self._new_clocks()
        self.lifecycle.child_started()
        t0_s = self.phases.begin()
        self.steps_state.restart_clock(t0_s, first_report_s)
        if training:
            self.phases.resume_train()
        if self.probes is not None:  # the child may train another model
            self.probes.reset_discovery()
        self.dispatch.after_fork_in_child(self, torn=torn)

    def start(self) -> Monitor:
        """Start the run (:meth:`Lifecycle.start <trainmeter.core.lifecycle.Lifecycle.start>`)."""
        self.lifecycle.start()
        return self

    warnings = property(attrgetter("faults.warnings"), doc="The run's warnings so far (at most MAX_WARNINGS).")
    status = property(attrgetter("lifecycle.status"), doc="starting, running, then the end status.")
    run_dir = property(attrgetter("lifecycle.run_dir"), doc="The run folder, or None in memory.")

    steps = property(lambda self: self.steps_state.steps + (self.lanes.steps() if self.lanes else 0),
                     doc="Optimizer steps counted so far over every lane (docs/spec.md section 2, 'Threads').")
    tokens = property(lambda self: self.steps_state.tokens + (self.lanes.tokens() if self.lanes else 0),
                      doc="Tokens (or samples, see token_unit) counted so far, summed over the lanes.")

    step_series = property(attrgetter("steps_state.step_series"), doc="Tokens per step and the time of each step.")

    def lane_records(self) -> list[LaneRecord]:
        """Every lane with a step, lane 1 first (the passport's ``lanes``). Any thread."""
        probes = self.probes
        return self.lanes.records(self.token_unit, probes.lane_one if probes is not None else None,
                                  self.controls.lane1_stop_step())

    series = property(attrgetter("registry.series"), doc="The run's series by name (a dict that never changes size).")
    series_info = property(attrgetter("registry.info"), doc="Series name -> its source and provenance.")
    series_dropped = property(attrgetter("registry.dropped"), doc="New names past max_series.")
    series_dropped_names = property(attrgetter("registry.dropped_names"), doc="The first of them.")
    queue_dropped = property(attrgetter("emitter.dropped"), doc="Emits from other threads dropped.")
    emits_ignored = property(attrgetter("emitter.ignored"), doc="Emitted values left out as bad (counted).")

    def record_at(self, name: str, t_s: float, value: float, *, x_kind: str = "time") -> None:
        """Record one point of a background sampler's series (``t_s``: seconds since the run began)."""
        self.registry.get(name, x_kind).append(self.steps_state.steps, t_s, float(value))

    def on_step(self, tokens: int, loss: StepLoss | None = None, *, loss_value: float | None = None) -> None:
        """One optimizer step of lane 1 (the step rule: :meth:`StepRecorder.step`). Training thread."""
        self.steps_state.count(tokens, loss, loss_value)

    @property
    def token_unit(self) -> str | None:
        """What the counted batches hold: ``tokens`` or ``samples`` (lane 1's, else another lane's); ``None`` while
        no batch was read (the count unknown, never 0: docs/spec.md section 2)."""
        unit = self._token_unit
        if unit is not None or not self.tokens:
            return unit
        return next((lane.unit for lane in list(self.lanes.lanes) if lane.unit), "tokens")

    def set_model(self, module: Any, token_unit: str | None) -> None:
        """Record the trained root module (from the probes) and the token unit."""
        self.model_ref = weakref.ref(module)
        self._token_unit = token_unit

    def declare_model(self, module: Any) -> None:
        """Name the trained module explicitly instead of discovering it."""
        if self.probes is not None:
            self.guard("declare-model", self.probes.declare_root, module)

    params = property(lambda self: dict(self.probes.params) if self.probes is not None else {},
                      doc="Parameter counts of the trained model (empty until found).")

    probes = property(attrgetter("lifecycle.probes"), doc="The torch probes (core/probes.py), or None (no torch).")

    reports = property(attrgetter("reporter.count"), doc="Reports made so far.")
    interval = property(attrgetter("reporter.interval"), doc="The last report's IntervalSummary.")
    session = property(attrgetter("reporter.session"), doc="The last report's SessionSummary.")
    memory = property(attrgetter("reporter.memory"), doc="The last report's memory sample.")
    text_line = property(attrgetter("reporter.text_line"), doc="The last text line.")
    worker = property(attrgetter("reporter.worker"), doc="The run's report worker (docs/spec.md section 20).")
    open_worker = property(attrgetter("reporter.opened_worker"), doc="The report worker if one was made (forks).")

    extensions = property(attrgetter("dispatch.extensions"), doc="The run's extensions in their computed order.")

    def set_step_hook(self, fn: Callable[[], None] | None, *, many: bool = False, at: int = 0) -> None:
        """Call ``fn`` (a wing's ``on_step``, or ``many``: the dispatcher's fan-out) after each step from ``at``."""
        self._step_many = many
        self.controls.set_hook(fn, at)  # while a control request is pending, its trampoline calls fn after it

    _step_many = False

    def next_step_hook_at(self, step: int, extension: Any = None) -> None:
        """Call ``extension``'s ``on_step`` next at the first counted step ``>= step``. Training thread."""
        if self._step_many:
            step = self.dispatch.schedule(extension, step)
        self.steps_state.hook_next_at(step)

    def elapsed_s(self) -> float:
        """Seconds since the session began (0 before). Any thread."""
        return self.phases.session_elapsed_s(self.clock())

    def enter_phase(self, name: str) -> None:
        """Pause training and start crediting ``name`` (outermost phase wins)."""
        self.spans.enter(name)

    def exit_phase(self) -> None:
        """Credit the phase opened by :meth:`enter_phase` and resume training (no-op when none is open)."""
        self.spans.exit()

    def carve(self, phase: str, seconds: float) -> None:
        """Move host-measured ``seconds`` of training time to ``phase`` (no sync)."""
        if self.spans.depth == 0:
            self.phases.carve(phase, seconds)

