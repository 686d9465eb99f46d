"""The public API for scripts and notebooks: ``monitor``, ``preload``, ``emit``, ``phase``, ``step``, ``batch``,
``calibrate``, ``stop``, ``checkpoint``, ``alert``."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Iterator
from contextlib import AbstractContextManager, ContextDecorator, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from trainmeter.core import monitor as _monitor_module
from trainmeter.core.controls import StopTraining
from trainmeter.core.lifecycle import exit_status
from trainmeter.core.monitor import Monitor
from trainmeter.core.phases import PHASE_NAME
from trainmeter.options import make_options

_NAMED = ("name", "budget_tokens", "budget_steps", "budget_flops", "run_dir", "interval_s", "widget")
MONITOR_KEYWORDS: tuple[str, ...] = (*_NAMED, "model",
                                     *(k for k in inspect.signature(make_options).parameters if k not in _NAMED))
"""Every keyword :func:`monitor` takes (the ``%%trainmeter`` flags' options, and ``model``)."""


def _guarded(m: Monitor, key: str, what: str, call: Any, *args: Any) -> bool:
    """``call(*args)``; whether it returned (a fault is warned once under ``key`` as ``what: exc``, never raised)."""
    try:
        call(*args)
        return True
    except Exception as exc:
        m.warn_once(key, f"{what}: {exc!r}")
        return False


def emit(**series: Any) -> None:
    """Record named scalars for the run in progress (no-op when none is), e.g. ``tm.emit(train_loss=loss, lr=lr)``.

    Values are floats or 0-d tensors (CUDA ones read without a sync); a bad value or name is left out with one
    warning, the others recorded (docs/spec.md section 18). Any thread; never raises.
    """
    m = _monitor_module._ACTIVE
    if m is None:
        return
    if "" in series:  # a series needs a name (docs/spec.md section 18)
        series = {k: v for k, v in series.items() if k}
        m.warn_once("emit-empty-name", "tm.emit(**{'': ...}) ignored: a series needs a name")
    _guarded(m, "emit", "tm.emit failed and was skipped", m.record, series)


def step(model: Any = None) -> None:
    """Count one optimizer step the run cannot see (an optimizer that is not ``torch.optim``), right after each update:
    ``opt.apply(grads); tm.step(model)``. Its loss is what reached backward since the last step, its tokens the
    batches of ``model``; needed only where trainmeter warns of backward calls with no step it knows (docs/spec.md
    section 11). No-op without a run; never raises.
    """
    m = _monitor_module._ACTIVE
    if m is None:
        return
    from trainmeter.core.explicit_steps import explicit_step

    explicit_step(m, "tm.step", model)


def batch(*, samples: int | None = None, tokens: int | None = None) -> None:
    """Declare what the step's batch holds where trainmeter cannot read it (a custom batch object), once per batch:
    ``tm.batch(samples=len(batch))`` or ``tm.batch(tokens=n)``. Batches declared between two optimizer steps add
    up (micro-batches); the step's first one replaces what was counted of that step, and from it on no batch is
    counted (provenance ``declared``; docs/spec.md section 2, "The batch rule"). Lane 1's training thread. No-op
    without a run; ``ValueError`` unless exactly one of them is given, as a non-negative int.
    """
    if (samples is None) == (tokens is None):
        raise ValueError("tm.batch takes exactly one of samples= or tokens=")
    unit, value = ("samples", samples) if tokens is None else ("tokens", tokens)
    try:
        count = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        count = -1
    if count < 0:
        raise ValueError(f"tm.batch({unit}={value!r}): a count is a non-negative int")
    m = _monitor_module._ACTIVE
    probes = None if m is None else m.probes
    if probes is not None:
        _guarded(m, "batch-declared", "tm.batch failed and was skipped", probes.root_calls.declare, count, unit)


def save() -> Path | None:
    """Write the passport of the last run whose passport a disk fault kept in memory (the next run also tries).

    Returns the run folder when written now, else ``None`` (none waiting, or the disk still refuses). Never raises.
    """
    return _monitor_module.save_unsaved()


def calibrate(dtypes: Any = None, *, device: Any = None, size: int | None = None, min_seconds: float = 0.25) -> Any:
    """Measure this device's dense-matmul ceiling per dtype, so MFU has a measured "of achievable" beside it.

    A short square matmul per dtype on ``device``, about ``min_seconds`` each (docs/spec.md section 5, "Measured
    ceiling"); inside a run credited to ``profiling``. Returns a :class:`trainmeter.compute.calibrate.Calibration`;
    ``ValueError`` for an unknown dtype, or a size or duration out of range.
    """
    from trainmeter.compute.calibrate import calibrate as measure

    with phase("profiling") if _monitor_module._ACTIVE is not None else nullcontext():
        return measure(dtypes, device=device, size=size, min_seconds=min_seconds)


def stop() -> bool:
    """Stop the run in progress after its next optimizer step (any thread); whether a live run took the request.

    A hand loop gets :class:`~trainmeter.core.controls.StopTraining` from that step's hook; a framework is asked
    through its own mechanism (docs/spec.md section 21). The run ends ``stopped`` (``stopped_by`` ``tm.stop``).
    Never raises.
    """
    m = _monitor_module._ACTIVE
    return bool(m is not None and m.controls.request_stop("tm.stop"))


def checkpoint() -> bool:
    """Checkpoint the run in progress after its next optimizer step (any thread); whether a live run took the request.

    The framework's saver, else ``torch.save`` of the model and primary optimizer into
    ``<run>/checkpoints/step-<n>.pt``, timed as ``checkpoint`` (docs/spec.md section 21); an unsafe save is refused
    with the reason (a warning, ``checkpoints_refused``). Never raises.
    """
    m = _monitor_module._ACTIVE
    return bool(m is not None and m.controls.request_checkpoint("tm.checkpoint"))


def alert(*rules: str) -> bool:
    """Add ``--alert`` rules to the run in progress (``tm.alert("val_loss>2.5:stop", "hang=120:notify")``), checked
    from the watchdog's next tick; whether a live run took them. ``ValueError`` for a bad rule (nothing added)."""
    from trainmeter.alerts.extension import parse_rules

    parsed = parse_rules(list(rules))
    m = _monitor_module._ACTIVE
    wing = m.dispatch.find("alerts") if m is not None else None
    if wing is not None:
        wing.add(parsed)
    return wing is not None


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Credit the enclosed span to phase ``name`` (``eval``, ``checkpoint``, ``reporting``, ``profiling``,
    ``data_wait`` or a custom lowercase identifier; ``ValueError`` otherwise, or for ``train``) instead of training;
    nested spans count once, for the outermost."""
    if not isinstance(name, str) or not PHASE_NAME.match(name) or name == "train":
        raise ValueError(
            f"invalid phase name {name!r}: use eval, checkpoint, reporting, profiling, data_wait "
            "or a custom lowercase identifier (not 'train')"
        )
    m = _monitor_module._ACTIVE
    entered = m is not None and _guarded(m, "phase", "tm.phase failed", m.enter_phase, name)
    try:
        yield
    finally:
        if entered:
            _guarded(m, "phase", "tm.phase failed", m.exit_phase)


def monitor(*, name: str | None = None, budget_tokens: Any = None, budget_steps: Any = None,
            budget_flops: Any = None, run_dir: Any = None, interval_s: Any = None, widget: bool = False,
            model: Any = None, **flags: Any) -> AbstractContextManager[Monitor]:
    """Monitor the enclosed training code; the passport is written on exit.

    Arguments match the ``%%trainmeter`` flags (``run_dir`` is ``--dir``); ``model`` names the trained module when
    discovery would not find it; ``widget=True`` shows the live widget in a notebook. Exceptions propagate (the run
    ends ``interrupted``, ``completed`` or ``failed``); ``tm.stop()`` ends the block ``stopped`` after a step.
    ``ValueError`` for a bad option or an unknown keyword, before anything runs.
    """
    unknown = sorted(set(flags) - set(MONITOR_KEYWORDS))
    if unknown:
        raise ValueError(f"unknown keyword {unknown[0]!r} for tm.monitor: valid keywords are "
                         f"{', '.join(MONITOR_KEYWORDS)}")
    options = make_options(name=name, budget_tokens=budget_tokens, budget_steps=budget_steps, budget_flops=budget_flops,
                           run_dir=run_dir, interval_s=interval_s, widget=widget, **flags)
    return MonitoredBlock(options, model)


def preload() -> None:
    """Import now what a run's start, first report and finish import of trainmeter, as ``%load_ext trainmeter`` does
    (docs/spec.md section 20, "Start"). Imports no torch, never raises. Call it on the training thread."""
    from trainmeter.extensions import preload as import_ahead

    import_ahead()


class MonitoredBlock(ContextDecorator):
    """``monitor``'s context and ``%%trainmeter``'s: a new run (and widget) per entry, or the given ``monitor``;
    started on entry, finished with the body's status on exit, re-raising unchanged (a class: a generator's
    ``__enter__`` could let a Ctrl-C escape before ``with`` holds ``__exit__``). ``show_widget`` ``None``: when
    ``options.widget`` and a notebook hosts it. Not re-entrant; training thread."""

    def __init__(self, options: Any, model: Any = None, show_widget: bool | None = None,
                 monitor: Monitor | None = None) -> None:
        self._options = options
        self._model = model
        self._show_widget = show_widget
        self._given = monitor
        self._sinks: list[Any] = []
        self._m: Monitor | None = None

    def __enter__(self) -> Monitor:
        m = self._m = self._given or self._new_run()
        try:
            from trainmeter.ranks import autostart

            autostart.give_way()  # a rank's run started at its optimizer's construction, not stepped yet
            m.start()  # on Ctrl-C or an error inside, start finishes the run itself, then re-raises
            if self._model is not None:
                m.declare_model(self._model)
            return m  # inside the try: a Ctrl-C at the return still finishes the run
        except BaseException as exc:
            m.finish(*exit_status(exc))
            self._close_sinks()
            raise

    def _new_run(self) -> Monitor:
        from trainmeter.extensions import default_extensions, make_monitor

        options = self._options
        show_widget = self._show_widget
        if show_widget is None and options.widget:
            from trainmeter.widget.host import widget_host

            show_widget = widget_host() is not None
        m = make_monitor(options, text=not show_widget, extensions=default_extensions(options))
        if show_widget:  # the widget's sinks added with interrupts held, then a held Ctrl-C delivered
            from trainmeter.core.interrupts import HeldInterrupts
            from trainmeter.widget.host import widget_sinks

            try:
                with HeldInterrupts() as held:
                    self._sinks.extend(widget_sinks(m.context))
                held.deliver()
            except BaseException:
                self._close_sinks()
                raise
        return m

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        from trainmeter.core.interrupts import HeldInterrupts

        m: Any = self._m
        held = HeldInterrupts()  # a Ctrl-C before finish holds its own is delivered after it, never instead of it
        try:
            with held:
                try:
                    if exc is None:
                        m.finish(m.controls.end_status("completed"))  # a framework that took a stop ended
                    elif isinstance(exc, StopTraining):
                        m.finish("stopped")  # the closing line says who stopped it and when; no traceback
                        return True
                    else:
                        m.finish(*exit_status(exc))
                    return False
                finally:
                    self._m = None  # a decorator's block is kept with its function: not the finished run
                    self._close_sinks()
        finally:
            held.deliver()

    def _close_sinks(self) -> None:
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close()


def run_monitored(m: Monitor, *, model: Any = None) -> AbstractContextManager[Monitor]:
    """Start ``m``, run the body, finish with the right status; re-raise unchanged."""
    return MonitoredBlock(None, model, monitor=m)
