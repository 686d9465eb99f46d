"""The public API for scripts and notebooks: ``monitor``, ``emit``, ``phase``, ``step``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ContextDecorator, contextmanager
from pathlib import Path
from typing import Any

from trainmeter.core import monitor as _monitor_module
from trainmeter.core.monitor import _PHASE_NAME, Monitor
from trainmeter.options import make_options

RESERVED_PHASES = ("train",)


def emit(**series: Any) -> None:
    """Record named scalars for the run in progress (no-op when none is).

    Values are floats or 0-d tensors; CUDA tensors are read without a device
    sync (their value appears once the copy has completed). Each value is
    checked on its own: a bad one (a string, a number too big for a float, a
    tensor on a device with no sync-free read, a reserved name such as
    ``tokens_per_step``, a new name past ``max_series``) is left out with one
    warning and the others are recorded. From a thread other than the one that
    started the run, values are queued and recorded at the training thread's
    next step. Never raises.

    Example:
        ``tm.emit(train_loss=loss, lr=sched.get_last_lr()[0])``
    """
    m = _monitor_module._ACTIVE
    if m is None:
        return
    try:
        m.record(series)
    except Exception as exc:
        m.warn_once("emit", f"tm.emit failed and was skipped: {exc!r}")


def step(model: Any = None) -> None:
    """Count one optimizer step the run cannot see (an optimizer that is not ``torch.optim``).

    Call it right after each update. The losses passed to backward since the previous step
    are its loss, and the batches of ``model`` (the module being trained; found from the
    optimizer otherwise, or ``tm.monitor(model=...)``) its tokens or samples. Needed only where
    trainmeter warns that backward calls come with no optimizer step it knows (docs/spec.md
    section 11); a ``torch.optim`` step is counted without it, and ``tm.step()`` beside one is ignored
    with one warning. No-op when no run is in progress.
    Never raises.

    Example:
        ``opt.apply(grads); tm.step(model)``
    """
    m = _monitor_module._ACTIVE
    if m is None:
        return
    from trainmeter.core.explicit_steps import explicit_step

    explicit_step(m, "tm.step", model)


def save() -> Path | None:
    """Write the passport of the last run whose passport a disk fault kept in memory.

    A full or read-only disk at the end of a run leaves its record in memory (the
    closing line says so); once the disk accepts writes, this writes it (the next
    monitored run also tries). Never raises.

    Returns:
        The run folder when the passport is written now, else ``None`` (none waiting, or the disk still refuses).
    """
    return _monitor_module.save_unsaved()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Credit the enclosed span to phase ``name`` instead of training.

    Known names: ``eval``, ``checkpoint``, ``reporting``, ``profiling``,
    ``data_wait``; any other lowercase identifier is a custom phase. Nested
    spans count once, for the outermost phase.

    Raises:
        ValueError: When ``name`` is not a lowercase identifier, or is ``train``.
    """
    if not isinstance(name, str) or not _PHASE_NAME.match(name) or name in RESERVED_PHASES:
        raise ValueError(
            f"invalid phase name {name!r}: use eval, checkpoint, reporting, profiling, data_wait "
            "or a custom lowercase identifier (not 'train')"
        )
    m = _monitor_module._ACTIVE
    entered = False
    if m is not None:
        try:
            m.enter_phase(name)
            entered = True
        except Exception as exc:
            m.warn_once("phase", f"tm.phase failed: {exc!r}")
    try:
        yield
    finally:
        if entered and m is not None:
            try:
                m.exit_phase()
            except Exception as exc:
                m.warn_once("phase", f"tm.phase failed: {exc!r}")


def monitor(*, name: str | None = None, budget_tokens: Any = None, budget_steps: Any = None,
            budget_flops: Any = None, run_dir: Any = None, interval_s: Any = None, widget: bool = False,
            model: Any = None, **flags: Any) -> AbstractContextManager[Monitor]:
    """Monitor the enclosed training code; the passport is written on exit.

    Arguments match the ``%%trainmeter`` flags (``run_dir`` is ``--dir``);
    ``model`` names the trained module when discovery would not find it.
    ``widget=True`` shows the live widget in a Jupyter or marimo notebook
    (``trainmeter.widget.host``; elsewhere the text line prints as without it).
    KeyboardInterrupt gives status ``interrupted``, any other exception
    ``failed``; both propagate unchanged.

    Raises:
        ValueError: For a bad option, before anything runs.
    """
    options = make_options(name=name, budget_tokens=budget_tokens, budget_steps=budget_steps,
                           budget_flops=budget_flops, run_dir=run_dir, interval_s=interval_s,
                           widget=widget, **flags)
    return _Monitor(options, model)


class _Monitor(ContextDecorator):
    """``monitor``'s context: a new run (and widget) per entry. Not re-entrant; training thread."""

    def __init__(self, options: Any, model: Any) -> None:
        self._options = options
        self._model = model
        self._sinks: list[Any] = []
        self._run: _Monitored | None = None

    def __enter__(self) -> Monitor:
        from trainmeter.extensions import default_extensions, make_monitor

        options = self._options
        show_widget = False
        if options.widget:
            from trainmeter.widget.host import widget_host

            show_widget = widget_host() is not None
        m = make_monitor(options, text=not show_widget, extensions=default_extensions(options))
        self._sinks = []
        try:
            if show_widget:
                from trainmeter.core.interrupts import HeldInterrupts
                from trainmeter.widget.host import widget_sinks

                with HeldInterrupts() as held:  # the widget's thread is either started and closed below, or not
                    self._sinks = widget_sinks(m)
                held.deliver()
            self._run = _Monitored(m, self._model)
            return self._run.__enter__()
        except BaseException:
            self._close_sinks()
            raise

    def __exit__(self, *exc: Any) -> bool:
        try:
            return self._run.__exit__(*exc) if self._run is not None else False
        finally:
            self._run = None
            self._close_sinks()

    def _close_sinks(self) -> None:
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close()


def run_monitored(m: Monitor, *, model: Any = None) -> AbstractContextManager[Monitor]:
    """Start ``m``, run the body, finish with the right status; re-raise unchanged."""
    return _Monitored(m, model)


class _Monitored:
    """Start on entry, finish with the body's status on exit. Training thread.

    A class, not a generator: a Ctrl-C that lands as a generator's ``__enter__``
    returns (at its ``next()`` call) escapes before the ``with`` statement holds
    ``__exit__``, and the started run would stay active for as long as the
    traceback lives (IPython keeps the last one). Here every point after the
    start is inside ``__enter__``'s ``try`` or inside the ``with`` block.
    """

    __slots__ = ("_m", "_model")

    def __init__(self, m: Monitor, model: Any) -> None:
        self._m = m
        self._model = model

    def __enter__(self) -> Monitor:
        m = self._m
        try:
            m.start()  # on Ctrl-C or an error inside, start finishes the run itself, then re-raises
            if self._model is not None:
                m.declare_model(self._model)
        except BaseException as exc:
            _finish(m, exc)
            raise
        return m

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            self._m.finish("completed")
        else:
            _finish(self._m, exc)
        return False


def _finish(m: Monitor, exc: BaseException) -> None:
    m.finish("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", exc)
