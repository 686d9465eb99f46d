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
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.core.interrupts import HeldInterrupts, TerminateHandler
from trainmeter.core.memory import MemoryProbe, MemoryReading
from trainmeter.core.phases import PhaseClock, cuda_synchronize
from trainmeter.core.scalars import ScalarReader, StepLoss
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.sink import RecordSink
from trainmeter.core.text import printable
from trainmeter.core.throughput import IntervalSummary, SessionSummary, interval_summary, session_summary

_ACTIVE: Monitor | None = None
_UNSAVED: Monitor | None = None  # the last run whose passport could not be written (a full disk at its end)
_ACTIVE_LOCK = threading.Lock()
_PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
LOSS_SERIES = "train_loss"
LATE_USER_LOSS = "train_loss.emitted"  # tm.emit(train_loss=...) that began after captured points
MAX_PENDING_LOSSES = 4096
MAX_PENDING = 100_000
MAX_QUEUED = 100_000
MAX_DROPPED_NAMES = 20
MAX_WARNINGS = 100
PHASE_REPORT_AFTER_S = 60.0
PHASE_REPORT_AFTER_INTERVALS = 10
DEFAULT_MAX_SERIES = 256
RESERVED_SERIES = ("tokens_per_step",)
_RESERVED_NAME = re.compile(r"(node|gpu\d+)\.|__")


class MonitorWarning(UserWarning):
    """A monitoring fault: trainmeter degrades and the run goes on."""


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
        self.warnings_suppressed = 0
        self.text_line = ""
        self.reports = 0
        self._window_start_tokens = 0  # tokens and steps when the report window began
        self._window_start_steps = 0
        self._next_report_s = self._interval_s  # clock seconds of the next report (training thread)
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
        self._held_step = 0  # a captured loss read on the host, waiting for the next step: step, time, value
        self._held_t_s = 0.0
        self._held_value = 0.0
        self._late_user_loss = False
        self._losses: deque[StepLoss] = deque()  # closed step losses not yet in their series, in step order
        self._captured_series: Series | None = None  # train_loss once a captured loss is in it
        self.series_info: dict[str, dict[str, Any]] = {}  # series name -> its source and provenance
        self._probes: Any = None
        self._want_probes = probes
        self.extensions: list[Any] = list(extensions or [])
        self._finished = False
        self._at_step: int | None = None
        self._at_steps: list[tuple[int, Callable[[], None]]] = []  # (step, callback) waiting; _at_step: the next
        self._step_hook: Callable[[], None] | None = None  # one extension's (see step_hook)
        self._hook_at = sys.maxsize  # the first step at which _step_hook is called next
        self._warned: set[str] = set()
        self._series_lock = threading.Lock()
        self._said_warnings: set[str] = set()
        self._owner_ident = threading.get_ident()  # the recording thread (set again at start)
        self._queued: deque[tuple[dict[str, Any], int]] = deque()
        self.queue_dropped = 0
        self._max_series = int(getattr(options, "max_series", DEFAULT_MAX_SERIES) or DEFAULT_MAX_SERIES)
        self._user_series = 0
        self.series_dropped = 0
        self.series_dropped_names: list[str] = []
        self._dropped_seen: set[str] = set()
        self._started: list[Any] = []  # 'record' and the extensions whose start was attempted
        self._finish_done: set[str] = set()
        self._terminate: TerminateHandler | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> Monitor:
        """Make the run folder, open the log, install probes, start the clocks.

        Ctrl-C is held back until the run is fully started (or fully undone):
        a Ctrl-C or any error during start finishes the run (slot freed,
        patches and threads restored, passport written where a folder exists)
        and is then re-raised.

        Raises:
            RuntimeError: When another run is being monitored in this process.
            KeyboardInterrupt: When Ctrl-C arrived during start (after cleanup).
        """
        global _ACTIVE
        save_unsaved(self._say)
        held = HeldInterrupts()
        try:
            with held:
                with _ACTIVE_LOCK:
                    if _ACTIVE is not None:
                        raise RuntimeError(
                            f"a run ({_ACTIVE.options.name!r}) is already being monitored in this process; "
                            "finish it before starting another"
                        )
                    _ACTIVE = self
                try:
                    self._start_parts()
                except BaseException as exc:
                    status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                    self._finish_parts(status, exc)
                    raise
                if held.pending:
                    self._finish_parts("interrupted", KeyboardInterrupt())
        finally:
            held.deliver()  # a Ctrl-C held back is never swallowed, whatever else happened
        return self

    def _start_parts(self) -> None:
        self._owner_ident = threading.get_ident()
        now = datetime.now(timezone.utc)
        self.started_at = now.isoformat(timespec="seconds")
        if self._record is not None:
            self._started.append("record")
            try:
                self.run_dir = self._record.open(self, self.started_at)
            except Exception as exc:  # an unwritable run folder: the run goes on in memory
                self.warn_once("run-folder", f"run folder unavailable ({exc!r}): the record is kept in memory "
                                             "and the passport written at the end if the folder can be made then")
        self._memory_probe = MemoryProbe(self._cuda_memory)
        self._terminate = TerminateHandler(self._on_terminate)
        self._terminate.install()
        if self._want_probes:
            self._start_probes()
        for ext in self.extensions:
            self._started.append(ext)
            self._guard(f"start-{getattr(ext, 'name', ext)}", ext.start, self)
        self._t0_s = self.phases.begin()
        self._next_report_s = self._t0_s + self._interval_s
        self.status = "running"
        self.phases.resume_train()

    def _start_probes(self) -> None:
        import importlib.util

        if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
            return
        from trainmeter.core.probes import TorchProbes

        probes = TorchProbes(self)
        self._probes = probes  # set first: a Ctrl-C inside start() still gets them removed
        try:
            probes.start()
        except Exception as exc:
            self.warn_once("torch-probes", f"torch probes disabled: {exc!r}")
            probes.stop()
            self._probes = None

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """End the run: final report, remove probes, write the passport.

        Each part runs once, in order, with Ctrl-C held back; the active-run
        slot is freed and patches and threads restored whatever happens. A
        Ctrl-C that arrived meanwhile is re-raised at the end, after cleanup.

        Raises:
            KeyboardInterrupt: Only a Ctrl-C the user pressed during finish.
        """
        raised = False
        held: HeldInterrupts | None = None
        for _ in range(3):  # a Ctrl-C before the handler was in place: finish again (parts run once)
            try:
                with HeldInterrupts() as held:
                    raised = self._finish_parts(status, error) or raised
                break
            except KeyboardInterrupt:
                raised = True
        if held is not None:
            held.deliver()  # a Ctrl-C held back meanwhile: the previous handler raises it
        if raised:
            raise KeyboardInterrupt

    def _finish_parts(self, status: str, error: BaseException | None) -> bool:
        """Run the parts of finish not yet done; returns whether a KeyboardInterrupt was raised in one."""
        global _ACTIVE
        interrupted = False
        done = self._finish_done
        try:
            if "status" not in done:
                done.add("status")
                self._finished = True
                self.status = status
                if error is not None:
                    self.error = f"{type(error).__name__}: {error}"
                self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            parts: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
            if self._probes is not None:
                parts.append(("torch-probes-stop", self._probes.stop, ()))
            # before the final report: spans they close are in its snapshot
            parts += [(f"stop-{getattr(ext, 'name', ext)}", ext.stop, ())
                      for ext in self._started if ext != "record"]
            if self.phases.session_start_s is not None:
                parts.append(("open-phase", self._close_open_phase, ()))
                parts.append(("final-report", self._report, (True,)))
            if "record" in self._started:
                parts += [("passport", self._write_passport, ()), ("log-close", self._record.close, ())]
            for key, fn, args in parts:
                if key in done:
                    continue
                done.add(key)
                for _attempt in range(2):  # a part cut by a Ctrl-C runs once more, so the record is whole
                    try:
                        fn(*args)
                    except KeyboardInterrupt:
                        interrupted = True
                        continue
                    except Exception as exc:
                        self.warn_once(key, f"{key} failed and was disabled: {exc!r}")
                    break
        finally:
            if self._terminate is not None:
                self._terminate.remove()
            with _ACTIVE_LOCK:
                if _ACTIVE is self:
                    _ACTIVE = None
        if "closing" not in done and "record" in self._started:
            done.add("closing")
            global _UNSAVED
            if not getattr(self._record, "passport_written", True):
                _UNSAVED = self  # kept (bounded: MAX_PENDING points per series) until tm.save() or the next run
            try:
                self._say(self._record.closing_line(self))
            except Exception:
                pass
        return interrupted

    def retry_passport(self) -> bool:
        """Write the passport again after a disk fault at the end; returns whether it is on disk now. Never raises."""
        if self._record is None:
            return True
        with HeldInterrupts():
            self._guard("passport-retry", self._record.write_passport, self)
            self._guard("log-close", self._record.close)
        return bool(getattr(self._record, "passport_written", True))

    def _close_open_phase(self) -> None:
        """Credit a ``tm.phase`` still open at the end (an exception or Ctrl-C inside it, or never exited)."""
        if self._phase_depth:
            self._phase_depth = 0
            self.phases.finish_phase(self._phase_name, self._phase_started_s)

    def _on_terminate(self, ends_process: bool) -> None:
        """SIGTERM: finish as ``terminated`` when the process is about to end; else save a passport and go on."""
        try:
            if ends_process:
                self._finish_parts("terminated", None)
                return
            self.warn_once("sigterm", f"SIGTERM at step {self.steps}: the program's own handler ran and the run "
                                      "went on; a passport was saved at that point")
            if self._record is not None and "record" in self._started and not self._finished:
                status, ended_at = self.status, self.ended_at
                self.status = "terminated"
                self.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
                try:
                    self._guard("passport", self._record.write_passport, self)
                finally:
                    self.status, self.ended_at = status, ended_at
        except BaseException:
            pass

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
    def scalar_reader(self) -> ScalarReader:
        """The reader of 0-d values (the probes read losses through it). Training thread."""
        return self._scalars

    def read_scalar(self, value: Any, key: Any) -> float | None:
        """Read a float or 0-d tensor now, or defer it (CUDA) to a later poll."""
        return self._scalars.read(value, key)

    def on_step(self, tokens: int, loss: StepLoss | None = None, *, loss_value: float | None = None) -> None:
        """One optimizer step of the primary optimizer (training thread).

        ``loss`` is the step's captured loss (the values passed to backward since the
        previous optimizer step); it reaches its series once the next step (or the end)
        has come, so a ``tm.emit(train_loss=...)`` made right after this step is seen first.
        ``loss_value`` is the same for a captured loss already read (a CPU loss: the probes'
        fast path), held in three attributes instead of a queued object, with the same timing.
        """
        # hot path (issue 12): a counter, a clock read, an append (and the previous step's loss)
        self.steps = steps = self.steps + 1
        self.tokens += tokens
        now = self._now()
        t_s = now - self._t0_s
        step_series = self.step_series
        if tokens != step_series.tokens:  # a new tokens-per-step run: rare once the batch shape is steady
            step_series.set_tokens(tokens)
        step_series.times.append(t_s)
        self._step_losses(steps, t_s, loss, loss_value)
        if steps == self._at_step:
            self._run_at_step()
        if steps >= self._hook_at:
            self._step_hook()  # type: ignore[misc]  # must not raise (the optimizer wing's lr and grad_norm)
        if now >= self._next_report_s:
            self._maybe_report()

    def on_step_read(self, tokens: int, loss_value: float) -> None:
        """:meth:`on_step` for a step whose loss was already read on the host (the probes' fast path).

        The same effects as ``on_step(tokens, loss_value=loss_value)`` with fewer operations:
        while nothing is queued and no loss of the user's is seen, the previous step's loss goes
        to ``train_loss`` and this one is held (training thread).
        """
        self.steps = steps = self.steps + 1
        self.tokens += tokens
        now = self._now()
        t_s = now - self._t0_s
        step_series = self.step_series
        if tokens != step_series.tokens:
            step_series.set_tokens(tokens)
        step_series.times.append(t_s)
        if self._scalars.queue or self._queued or self._losses or self._user_loss:
            self._step_losses(steps, t_s, None, loss_value)
        else:
            if self._held_step:  # the previous step's loss: its step has passed
                (self._captured_series or self._captured_loss_series()).append(
                    self._held_step, self._held_t_s, self._held_value)
            self._held_step = steps
            self._held_t_s = t_s
            self._held_value = loss_value
        if steps == self._at_step:
            self._run_at_step()
        if steps >= self._hook_at:
            self._step_hook()  # type: ignore[misc]  # must not raise
        if now >= self._next_report_s:
            self._maybe_report()

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

    @property
    def step_hook(self) -> Callable[[], None] | None:
        """One extension's callable, run after a step is counted and before the report check (training thread).

        Called at every counted step from when it is set, until :meth:`next_step_hook_at` moves its next
        call further (so a sampling extension costs nothing on the steps it skips). Must not raise.
        """
        return self._step_hook

    @step_hook.setter
    def step_hook(self, fn: Callable[[], None] | None) -> None:
        self._step_hook = fn
        self._hook_at = 0 if fn is not None else sys.maxsize

    def next_step_hook_at(self, step: int) -> None:
        """Call the step hook next at the first counted step ``>= step`` (from the hook itself; training thread)."""
        if self._step_hook is not None:
            self._hook_at = step

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

    def record(self, series: dict[str, Any], step: int | None = None) -> None:
        """Record named scalars at ``step`` (default: the current step) (``tm.emit``, taps).

        Each value is checked on its own: good ones are recorded, each bad one
        (not a number, too big for a float, a ``__float__`` that raises, a
        tensor with no sync-free read, a reserved or over-the-cap name) is left
        out with one warning. Off the recording thread (the one that started
        the run) values are queued and recorded at its next step or report
        (at most ``MAX_QUEUED``; more are counted and dropped with a warning).
        Any thread; never raises.
        """
        if threading.get_ident() != self._owner_ident:
            self._enqueue(series, step)
            return
        if self._queued:
            self._drain_queue()
        now = self._now()
        t_s = now - self._t0_s
        if step is None:
            step = self.steps
        known = self.series
        for name, value in series.items():
            existing = known.get(name) if type(value) is float else None
            if existing is not None and existing.x_kind == "step" and name != LOSS_SERIES:
                existing.append(step, t_s, value)  # fast path: a float for a series already recorded
                continue
            number = self._checked(name, value, (name, step, t_s))
            if number is not None and name == LOSS_SERIES and not self._user_loss:
                name = self._user_loss_name()  # the headline, or train_loss.emitted after captured points
            if number is not None:
                series_ = self.series.get(name) or self._series(name)
                series_.append(step, t_s, number)
        if now >= self._next_report_s:
            self._maybe_report()

    def _checked(self, name: Any, value: Any, key: Any) -> float | None:
        """``value`` as a float to record under ``name``, or ``None`` (warned once per name and fault)."""
        existing = self.series.get(name) if type(name) is str else None
        if existing is None:
            if not isinstance(name, str) or name in RESERVED_SERIES or _RESERVED_NAME.match(name):
                self.warn_once(f"emit-reserved-{name}",
                               f"tm.emit({printable(name)}=...) ignored: the name is reserved for trainmeter's own "
                               "series (tokens_per_step, node.*, gpu<N>.*, __*)")
                return None
            if self._user_series >= self._max_series:
                self._drop_series(name)
                return None
        elif existing.x_kind != "step":
            self.warn_once(f"emit-reserved-{name}", f"tm.emit({printable(name)}=...) ignored: a background "
                                                    "sampler owns that series")
            return None
        if type(value) is float:
            number: float | None = value
        else:
            try:
                if isinstance(value, (str, bytes)):
                    raise TypeError(f"expected a float or a 0-d tensor, got {type(value).__name__}")
                number = self._scalars.read(value, key)
            except Exception as exc:  # TypeError, OverflowError, a __float__ that raises, ...
                self.warn_once(f"emit-{name}", f"tm.emit({printable(name)}=...) ignored: {printable(exc)}")
                return None
            if number is None and getattr(value, "is_cpu", None) is False and not getattr(value, "is_cuda", False):
                device = getattr(value, "device", "?")
                self.warn_once(f"emit-{name}", f"tm.emit({printable(name)}=...) ignored: a tensor on {device} has "
                                               "no sync-free read (pass a CPU or CUDA tensor or a float)")
                return None
        if existing is None:
            self._user_series += 1
        return number

    def _drop_series(self, name: str) -> None:
        """Count a name past the cap once (names, not emits; the set of names seen is itself capped)."""
        if name in self._dropped_seen:
            return
        if len(self._dropped_seen) < MAX_QUEUED:
            self._dropped_seen.add(name)
        self.series_dropped += 1
        if len(self.series_dropped_names) < MAX_DROPPED_NAMES:
            self.series_dropped_names.append(printable(name)[:80])
        self.warn_once("series-cap", f"more than {self._max_series} series (max_series): {printable(name)[:80]!s} "
                                     "and later new names are not recorded; the passport lists them")

    def _enqueue(self, series: dict[str, Any], step: int | None) -> None:
        """Queue values emitted off the recording thread (any thread; bounded)."""
        if len(self._queued) >= MAX_QUEUED:
            self.queue_dropped += 1
            self.warn_once("emit-queue", f"tm.emit from other threads: more than {MAX_QUEUED:,} values waiting for "
                                         "the training thread; later ones are counted and dropped")
            return
        self._queued.append((dict(series), self.steps if step is None else step))

    def _drain_queue(self) -> None:
        """Record values queued by other threads, stamped now (recording thread only; no backwards times)."""
        t_s = self._now() - self._t0_s
        queued = self._queued
        for _ in range(len(queued)):
            try:
                values, step = queued.popleft()
            except IndexError:
                break
            for name, value in values.items():
                number = self._checked(name, value, (name, step, t_s))
                if number is not None:
                    (self.series.get(name) or self._series(name)).append(step, t_s, number)

    def record_at(self, name: str, t_s: float, value: float, *, x_kind: str = "time") -> None:
        """Record one point of a series owned by a background sampler.

        Each series must have a single writing thread; samplers use their own
        names (``gpu0.util``, ``node.cpu``). ``t_s`` is seconds since the run began.
        """
        self._series(name, x_kind).append(self.steps, t_s, float(value))

    def elapsed_s(self) -> float:
        """Seconds since the session began (0 before). Any thread."""
        return self.phases.session_elapsed_s(self.clock())

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

    def _poll_scalars(self, t_s: float) -> None:
        for key, value in self._scalars.poll():
            name, step, at_s = key  # type: ignore[misc]
            if type(name) is StepLoss:
                name.resolve(step, at_s, value)  # (step loss, part index, field)
            else:
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
        """Credit the phase opened by :meth:`enter_phase` and resume training (no-op when none is open)."""
        if self._phase_depth == 0:
            return
        self._phase_depth -= 1
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
        """Call ``fn`` on the training thread right after optimizer step ``step`` (once; a step already
        counted never comes). Several callbacks may wait; the hot path compares one integer."""
        if step <= self.steps:
            return
        self._at_steps.append((step, fn))
        self._at_step = min(s for s, _ in self._at_steps)

    def _run_at_step(self) -> None:
        due = [fn for s, fn in self._at_steps if s == self.steps]
        self._at_steps = [(s, fn) for s, fn in self._at_steps if s > self.steps]
        self._at_step = min((s for s, _ in self._at_steps), default=None)
        for fn in due:
            self._guard("at-step", fn)

    def add_reader(self) -> dict[str, int]:
        """Register a series reader; returns its cursor map (name -> position)."""
        cursor: dict[str, int] = {}
        self._readers.append(cursor)
        return cursor

    # -- reports -----------------------------------------------------------------------
    def _maybe_report(self) -> None:
        if self._finished:
            return
        if self._phase_depth:
            # Reports wait for the phase to end (its time stays whole) unless it has been open for
            # PHASE_REPORT_AFTER_INTERVALS intervals (a phase never exited, or a very long eval):
            # then reports go on inside it and the phase is not credited with their time.
            opened_s = self.clock() - self._phase_started_s
            if opened_s < max(PHASE_REPORT_AFTER_S, PHASE_REPORT_AFTER_INTERVALS * self._interval_s):
                return
            self.warn_once(f"phase-open-{self._phase_name}",
                           f"phase {self._phase_name!r} has been open for {opened_s:.0f} s: reports continue inside "
                           "it (was its tm.phase block exited?)")
        held = HeldInterrupts()
        try:
            with held:  # a Ctrl-C never cuts a report between a write and its cursor
                t0 = self.clock()
                self._guard("report", self._report, False)
                if self._phase_depth:
                    self._phase_started_s += self.clock() - t0  # the report's time is reporting's, not the phase's
        finally:
            held.deliver()

    def _report(self, final: bool) -> None:
        resume = self.phases.training and not final
        self.phases.pause_train()
        t0 = self.clock()
        try:
            self._report_body(final, t0)
        finally:  # whatever failed, the timer advances and training resumes
            try:
                self.phases.finish_phase("reporting", t0)
            finally:
                self._next_report_s = self.clock() + self._interval_s
                if resume:
                    self.phases.resume_train()

    def _report_body(self, final: bool, t0: float) -> None:
        self.interval = interval_summary(tokens=self.tokens - self._window_start_tokens,
                                         steps=self.steps - self._window_start_steps,
                                         train_s=self.phases.take_window_train_s())
        elapsed_s = self.phases.session_elapsed_s(t0)
        self.session = session_summary(tokens=self.tokens, elapsed_s=elapsed_s)
        phases_s = dict(self.phases.totals_s)
        self._window_start_tokens, self._window_start_steps = self.tokens, self.steps
        if self._queued:
            self._drain_queue()
        self._poll_scalars(elapsed_s)
        if self._losses or self._held_step:
            self._flush_losses(float("inf") if final else self.steps)
        if self._memory_probe is not None:
            self.memory = self._guard("memory", self._memory_probe.sample)
        self.reports += 1
        extra = {}
        for ext in self.extensions:
            fields = getattr(ext, "interval_fields", None)
            if fields is not None:
                extra[ext.name] = self._guard(f"fields-{ext.name}", fields)
        if self._record is not None:
            self._guard("run-log", self._record.write_interval, self, elapsed_s, phases_s, extra)
            self._trim()
            self.text_line = self._guard("text-line", self._record.text_line, self) or self.text_line
        if self.text and not final:
            self._say(self.text_line)
            for warning in self.extension_warnings():
                if warning not in self._said_warnings:
                    self._said_warnings.add(warning)
                    self._say(f"trainmeter warning: {warning}")

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
            print(printable(line), file=self.out or sys.stdout, flush=True)
        except Exception:
            pass

    def warn_once(self, key: str, message: str) -> None:
        """Warn once per ``key`` for this run; the message is kept for the passport. Any thread.

        Control characters in ``message`` are escaped; after ``MAX_WARNINGS``
        distinct warnings, later ones are only counted (``warnings_suppressed``).
        """
        if key in self._warned:
            return
        self._warned.add(key)
        if len(self.warnings) >= MAX_WARNINGS:
            self.warnings_suppressed += 1
            return
        message = printable(message)
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
