"""The monitor: one run's state, fed by sources and read by sinks.

Sources (torch probes, ``tm.emit``, ``tm.phase``, background samplers) write
into the :class:`Monitor`; sinks (run log, text line, passport, widget) read
it. Reports happen on the training thread at step or emit boundaries once
``interval_s`` has passed (seed 000: snapshot first, then sample and write, and
the report's own cost is credited to ``reporting``). Nothing here raises into
the user's loop: faults warn once and degrade.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.core.memory import MemoryProbe, MemoryReading
from trainmeter.core.phases import PhaseClock, cuda_synchronize
from trainmeter.core.scalars import ScalarReader
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.sink import RecordSink
from trainmeter.core.throughput import IntervalSummary, SessionSummary, interval_summary, session_summary

_ACTIVE: Monitor | None = None
_ACTIVE_LOCK = threading.Lock()
_PHASE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
LOSS_SERIES = "train_loss"
MAX_PENDING = 100_000


class MonitorWarning(UserWarning):
    """A monitoring fault: trainmeter degrades and the run goes on."""


def active() -> Monitor | None:
    """Return the monitor of the run in progress, or ``None``. Any thread."""
    return _ACTIVE


class Monitor:
    """One monitored run.

    Args:
        options: Validated options (``trainmeter.options.MonitorOptions``: ``name``,
            ``run_root``, ``interval_s``, ``to_dict()`` and the wings' fields).
        clock: Monotonic clock (injected in tests).
        synchronize: Called at phase transitions; defaults to a CUDA sync when
            CUDA is initialised, nothing otherwise.
        out: Where text lines go (``sys.stdout`` by default).
        text: Whether to print a text line each report.
        extensions: Extra sources/sinks with ``start(monitor)``/``stop()``.
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
        self._t0_s = 0.0
        self.phases = PhaseClock(self.clock, synchronize or cuda_synchronize())
        self.status = "starting"
        self.out = out
        self.text = text
        self.series: dict[str, Series] = {}
        self.step_series = StepSeries("tokens_per_step")
        self.steps = 0
        self.tokens = 0
        self.token_unit = "tokens"
        self.model_ref: weakref.ReferenceType[Any] | None = None
        self.interval: IntervalSummary | None = None
        self.session: SessionSummary | None = None
        self.memory: MemoryReading | None = None
        self.run_dir: Path | None = None
        self.started_at: str | None = None
        self.ended_at: str | None = None
        self.error: str | None = None
        self.warnings: list[str] = []
        self.text_line = ""
        self.reports = 0
        self._window_tokens = 0
        self._window_steps = 0
        self._last_report_s = 0.0
        self._phase_depth = 0
        self._phase_started_s = 0.0
        self._phase_name = ""
        self._phase_resume = False
        self._scalars = ScalarReader()
        self._memory_probe: MemoryProbe | None = None
        self._record = record
        self._cuda_memory = cuda_memory
        self._readers: list[dict[str, int]] = []
        self._user_loss = False
        self._probes: Any = None
        self._want_probes = probes
        self.extensions: list[Any] = list(extensions or [])
        self._finished = False
        self._at_step: int | None = None
        self._at_step_fn: Callable[[], None] | None = None
        self._warned: set[str] = set()
        self._series_lock = threading.Lock()
        self._said_warnings: set[str] = set()

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> Monitor:
        """Make the run folder, open the log, install probes, start the clocks.

        Raises:
            RuntimeError: When another run is being monitored in this process.
        """
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                raise RuntimeError(
                    f"a run ({_ACTIVE.options.name!r}) is already being monitored in this process; "
                    "finish it before starting another"
                )
            _ACTIVE = self
        try:
            now = datetime.now(timezone.utc)
            self.started_at = now.isoformat(timespec="seconds")
            if self._record is not None:
                self.run_dir = self._record.open(self, self.started_at)
            self._memory_probe = MemoryProbe(self._cuda_memory)
        except BaseException:
            with _ACTIVE_LOCK:
                _ACTIVE = None
            raise
        if self._want_probes:
            self._start_probes()
        for ext in self.extensions:
            self._guard(f"start-{getattr(ext, 'name', ext)}", ext.start, self)
        self._last_report_s = self._t0_s = self.phases.begin()
        self.status = "running"
        self.phases.resume_train()
        return self

    def _start_probes(self) -> None:
        import importlib.util

        if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
            return
        from trainmeter.core.probes import TorchProbes

        probes = TorchProbes(self)
        try:
            probes.start()
            self._probes = probes
        except Exception as exc:
            self.warn_once("torch-probes", f"torch probes disabled: {exc!r}")
            probes.stop()

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """End the run: final report, remove probes, write the passport. Never raises."""
        global _ACTIVE
        if self._finished:
            return
        self._finished = True
        self.status = status
        if error is not None:
            self.error = f"{type(error).__name__}: {error}"
        self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self._probes is not None:
            self._guard("torch-probes-stop", self._probes.stop)
        for ext in self.extensions:  # before the final report: spans they close are in its snapshot
            self._guard(f"stop-{getattr(ext, 'name', ext)}", ext.stop)
        self._guard("final-report", self._report, True)
        self._guard("passport", self._write_passport)
        if self._record is not None:
            self._guard("log-close", self._record.close)
        with _ACTIVE_LOCK:
            if _ACTIVE is self:
                _ACTIVE = None
        if self._record is not None:
            self._say(self._record.closing_line(self))

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

    def read_scalar(self, value: Any, key: Any) -> float | None:
        """Read a float or 0-d tensor now, or defer it (CUDA) to a later poll."""
        return self._scalars.read(value, key)

    def on_step(self, tokens: int, losses: list[float] | None = None) -> None:
        """One optimizer step of the primary optimizer (training thread)."""
        # hot path (issue 12): counters, a clock read, an append (and the loss's)
        self.steps = steps = self.steps + 1
        self.tokens += tokens
        self._window_tokens += tokens
        self._window_steps += 1
        now = self._now()
        t_s = now - self._t0_s
        step_series = self.step_series
        if tokens != step_series.tokens:  # a new tokens-per-step run: rare once the batch shape is steady
            step_series.set_tokens(tokens)
        step_series.times.append(t_s)
        if losses and not self._user_loss:
            loss = losses[0] if len(losses) == 1 else sum(losses) / len(losses)
            (self.series.get(LOSS_SERIES) or self._series(LOSS_SERIES)).append(steps, t_s, loss)
        if self._scalars.queue:
            self._poll_scalars(t_s)
        if self.steps == self._at_step and self._at_step_fn is not None:
            self._guard("at-step", self._at_step_fn)
        if now - self._last_report_s >= self._interval_s:
            self._maybe_report()

    def record(self, series: dict[str, Any], step: int | None = None) -> None:
        """Record named scalars at ``step`` (default: the current step) (``tm.emit``, taps)."""
        now = self._now()
        t_s = now - self._t0_s
        if step is None:
            step = self.steps
        for name, value in series.items():
            if name == LOSS_SERIES:
                self._user_loss = True
            if type(value) is float:
                number: float | None = value
            else:
                try:
                    number = self._scalars.read(value, (name, step, t_s))
                except TypeError as exc:
                    self.warn_once(f"emit-{name}", f"tm.emit({name}=...) ignored: {exc}")
                    continue
            if number is not None:
                series_ = self.series.get(name) or self._series(name)
                series_.append(step, t_s, number)
        if now - self._last_report_s >= self._interval_s:
            self._maybe_report()

    def record_at(self, name: str, t_s: float, value: float, *, x_kind: str = "time") -> None:
        """Record one point of a series owned by a background sampler.

        Each series must have a single writing thread; samplers use their own
        names (``gpu0.util``, ``node.cpu``). ``t_s`` is seconds since the run began.
        """
        self._series(name, x_kind).append(self.steps, t_s, float(value))

    def elapsed_s(self) -> float:
        """Seconds since the session began (0 before). Any thread."""
        return self.phases.session_elapsed_s(self.clock())

    def _poll_scalars(self, t_s: float) -> None:
        for key, value in self._scalars.poll():
            if key == "__loss__":
                if not self._user_loss:
                    self._series(LOSS_SERIES).append(self.steps, t_s, value)
            else:
                name, step, at_s = key  # type: ignore[misc]
                self._series(name).append(step, at_s, value)

    def _series(self, name: str, x_kind: str = "step") -> Series:
        series = self.series.get(name)
        if series is None:
            with self._series_lock:  # samplers create series from their own threads
                series = self.series.get(name)
                if series is None:
                    grown = dict(self.series)
                    series = grown[name] = Series(name, x_kind)
                    self.series = grown  # readers iterate a dict that never changes size
        return series

    def enter_phase(self, name: str) -> None:
        """Pause training and start crediting ``name`` (outermost phase wins)."""
        self._phase_depth += 1
        if self._phase_depth > 1:
            return
        self._phase_name = name
        self._phase_resume = self.phases.training
        self.phases.pause_train()
        self._phase_started_s = self.clock()

    def exit_phase(self) -> None:
        """Credit the phase opened by :meth:`enter_phase` and resume training."""
        self._phase_depth = max(0, self._phase_depth - 1)
        if self._phase_depth:
            return
        self.phases.finish_phase(self._phase_name, self._phase_started_s)
        if self._phase_resume and not self._finished:
            self.phases.resume_train()

    def carve(self, phase: str, seconds: float) -> None:
        """Move host-measured ``seconds`` of training time to ``phase`` (no sync)."""
        if self._phase_depth == 0:
            self.phases.carve(phase, seconds)

    def at_step(self, step: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the training thread right after optimizer step ``step`` (one callback)."""
        self._at_step, self._at_step_fn = step, fn

    def add_reader(self) -> dict[str, int]:
        """Register a series reader; returns its cursor map (name -> position)."""
        cursor: dict[str, int] = {}
        self._readers.append(cursor)
        return cursor

    # -- reports -----------------------------------------------------------------------
    def _maybe_report(self) -> None:
        if self._phase_depth == 0 and not self._finished:
            self._guard("report", self._report, False)

    def _report(self, final: bool) -> None:
        resume = self.phases.training and not final
        self.phases.pause_train()
        t0 = self.clock()
        self.interval = interval_summary(tokens=self._window_tokens, steps=self._window_steps,
                                         train_s=self.phases.take_window_train_s())
        elapsed_s = self.phases.session_elapsed_s(t0)
        self.session = session_summary(tokens=self.tokens, elapsed_s=elapsed_s)
        phases_s = dict(self.phases.totals_s)
        self._window_tokens = self._window_steps = 0
        self._poll_scalars(elapsed_s)
        if self._memory_probe is not None:
            self.memory = self._guard("memory", self._memory_probe.sample)
        self.reports += 1
        extra = {}
        for ext in self.extensions:
            fields = getattr(ext, "interval_fields", None)
            if fields is not None:
                extra[ext.name] = self._guard(f"fields-{ext.name}", fields)
        if self._record is not None:
            self._record.write_interval(self, elapsed_s, phases_s, extra)
            self._trim()
            self.text_line = self._record.text_line(self)
        if self.text and not final:
            self._say(self.text_line)
            for warning in self.extension_warnings():
                if warning not in self._said_warnings:
                    self._said_warnings.add(warning)
                    self._say(f"trainmeter warning: {warning}")
        self.phases.finish_phase("reporting", t0)
        self._last_report_s = self.clock()
        if resume:
            self.phases.resume_train()

    def _trim(self) -> None:
        """Drop points every reader has seen; keep at most ``MAX_PENDING`` per series."""
        if not self._readers:
            return
        for series in (self.step_series, *self.series.values()):
            upto = min(cursor.get(series.name, 0) for cursor in self._readers)
            series.trim(max(upto, series.end - MAX_PENDING))

    def _write_passport(self) -> None:
        if self._record is not None:
            self._record.write_passport(self)

    def extension_warnings(self) -> list[str]:
        """Extensions' current warnings (a starving loader, a full disk, swap). Any thread."""
        out: list[str] = []
        for ext in self.extensions:
            if hasattr(ext, "warnings"):
                try:
                    out.extend(ext.warnings())
                except Exception:
                    continue
        return out

    # -- faults ------------------------------------------------------------------------
    def _say(self, line: str) -> None:
        try:
            print(line, file=self.out or sys.stdout, flush=True)
        except Exception:
            pass

    def warn_once(self, key: str, message: str) -> None:
        """Warn once per ``key`` for this run; the message is kept for the passport."""
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append(message)
        try:
            warnings.warn(f"trainmeter: {message}", MonitorWarning, stacklevel=2)
        except Exception:
            pass

    def _guard(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn``; on a fault warn once and return ``None``."""
        try:
            return fn(*args)
        except Exception as exc:
            self.warn_once(key, f"{key} failed and was disabled: {exc!r}")
            return None
