"""What each adapter of the integration wing builds on: its call sites, the fit wrapper, the logged names, and the
loggers' adapter: series the loop already logs through W&B, TensorBoard (and tensorboardX) and MLflow, recorded
after the call returns, by the outermost call (docs/spec.md section 11)."""

from __future__ import annotations

import functools
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from types import MethodType
from typing import Any

Args = tuple[Any, ...]  # a wrapped call's positional arguments after ``self``
Kwargs = dict[str, Any]
OWN_SERIES = ("train_loss", "tokens_per_step")  # measured by trainmeter: a logged key of that name is prefixed
MEASURED_TWICE = ("grad_norm",)  # also read by trainmeter from the same clip_grad_norm_: one point per step


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """One patched call site: ``owner.attr`` in ``module`` (``owner`` ``""``: a module function). ``tap``: the library
    whose logging call this is (``extract``: ``(args, kwargs) -> {name: scalar}``), ``""`` for an entry point;
    ``logs``: an entry point whose callback reads the framework's logs too; ``callbacks_at``: position of the
    callbacks argument after ``self`` (``-1``: none); ``fit``: ``False`` for a callback that joins for the
    framework's events alone (HF's ``evaluate``); ``phase``: each call is a span of that phase (``"eval"``: the
    framework's own evaluation, docs/spec.md section 9), when ``when(adapter, target, args, kwargs)`` says so
    (``None``: always)."""

    module: str
    owner: str
    attr: str
    tap: str = ""
    extract: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]] | None = None
    logs: bool = False
    callbacks_at: int = -1
    callbacks_name: str = ""
    fit: bool = True
    phase: str = ""
    when: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], bool] | None = None


def record_logged(monitor: Any, key: str, values: dict[str, Any], source: str, measured: bool = True) -> int:
    """Record logged scalars at the current step, a name trainmeter measures itself as ``<key>.<name>`` (with
    ``measured``, a ``MEASURED_TWICE`` one it records already left out), ``series_info`` naming ``source``; how many."""
    values = {(f"{key}.{k}" if k in OWN_SERIES else k): v for k, v in values.items()
              if not (measured and k in MEASURED_TWICE and k in monitor.series)}
    for name in values:
        monitor.describe_series(name, {"provenance": "measured", "source": source}, replace=False)
    if values:
        monitor.record(values)
    return len(values)


class Adapter:
    """One framework's part of the wing (one per run): its ``control`` (the :class:`FrameworkControl` settings;
    ``None``: none), the ``sites`` it wraps, ``steps_at`` the attribute of the framework's own step count,
    ``callback_class`` the maker of the callback class whose ``cls(adapter)`` joins a fit's callbacks argument
    (``None``: none), ``joins_iterables``: whether a callbacks argument of the framework's own list type gets a list
    with ours."""

    framework = ""
    control: dict[str, Any] | None = None
    sites: tuple[Site, ...] = ()
    steps_at = ""
    callback_class: Any = None
    joins_iterables = True

    def __init__(self, wing: Any) -> None:
        self.wing = wing

    def publish(self, original: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        """A call (accelerate's ``prepare``, Fabric's ``setup``) that publishes ``target``'s control and is no fit:
        the object stays the control."""
        if not self.wing.depth and self.wing.gate.here():
            with self.wing.guard(self.framework, "adapter disabled"):
                self.wing.begin(self, target)
        return original(target, *args, **kwargs)

    def wrap(self, site: Site, original: Any) -> Any:
        """The wrapper of ``site``: the adapter's ``on_<attr>(original, owner_self, *args, **kwargs)``, else a fit
        (or the call alone, for a site that is only a ``phase``), inside the site's phase span."""
        method = getattr(self, f"on_{site.attr}", None)
        if method is not None:
            inner = functools.wraps(original)(lambda target, *args, **kwargs: method(original, target, *args, **kwargs))
        else:
            inner = original if site.phase and not site.fit and not site.logs else self.fit(site, original)
        return self.span(site, inner) if site.phase else inner

    def span(self, site: Site, inner: Any) -> Any:
        """``inner`` as a span of ``site.phase`` (entered as ``tm.phase`` is: the outermost span wins)."""
        wing = self.wing

        @functools.wraps(inner)
        def span(target: Any, *args: Any, **kwargs: Any) -> Any:
            monitor, entered = wing.monitor, False
            if monitor is not None and wing.gate.here():
                with wing.guard(self.framework, f"{site.phase} spans disabled"):
                    if site.when is None or site.when(self, target, args, kwargs):
                        monitor.enter_phase(site.phase)
                        entered = True
            try:
                return inner(target, *args, **kwargs)
            finally:
                if entered:
                    with wing.guard(self.framework, f"{site.phase} spans disabled"):
                        monitor.exit_phase()

        return span

    def after_wrap(self, site: Site, owner: Any) -> None:
        """Called once ``site`` is wrapped on ``owner``."""

    def begin(self, site: Site, target: Any, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs, Any]:
        """A fit of ``target`` begins: the arguments to call it with and what :meth:`end` gets (its callback)."""
        extra = self.callback_class()(self) if self.callback_class is not None else None
        if extra is not None and site.callbacks_at >= 0:
            args, kwargs = self.with_callback(site, args, kwargs, extra)
        return args, kwargs, extra

    def end(self, target: Any, extra: Any) -> None:
        """The fit ended (:meth:`begin`'s ``extra``)."""

    def own_steps(self, target: Any) -> int | None:
        """The framework's own optimizer-step count, or ``None`` (never raises)."""
        try:
            return int(attrgetter(self.steps_at)(target)) if self.steps_at else None
        except Exception:
            return None

    def fit(self, site: Site, original: Any) -> Any:
        """A framework's fit: the callback joins it and the control is published while it runs (outermost only)."""
        wing, adapter = self.wing, self

        @functools.wraps(original)
        def fit(target: Any, *args: Any, **kwargs: Any) -> Any:
            if wing.depth or not wing.gate.here():
                return original(target, *args, **kwargs)
            try:
                if site.fit:
                    wing.begin(adapter, target)
                args, kwargs, extra = adapter.begin(site, target, args, kwargs)
            except Exception as exc:
                wing.warn(adapter.framework, f"{adapter.framework} adapter disabled: {exc!r}")
                return original(target, *args, **kwargs)
            wing.depth += 1
            try:
                return original(target, *args, **kwargs)
            finally:
                wing.depth -= 1
                if site.fit:
                    wing.end(adapter, target, extra)
                else:
                    adapter.end(target, extra)

        return fit

    def with_callback(self, site: Site, args: Args, kwargs: Kwargs, extra: Any) -> tuple[Args, Kwargs]:
        """``args, kwargs`` with ``extra`` appended to the site's callbacks argument (a new list)."""
        at = site.callbacks_at
        given = args[at] if len(args) > at else kwargs.get(site.callbacks_name)
        if given is None:
            merged: Any = [extra]
        elif not isinstance(given, (list, tuple)) and not self.joins_iterables:  # keras' CallbackList: left as given
            return args, kwargs
        elif hasattr(type(given), "__iter__") and not isinstance(given, (str, bytes)):  # a list, fastai's L
            merged = [*given, extra]
        else:  # one callback
            merged = [given, extra]
        if len(args) > at:
            return (*args[:at], merged, *args[at + 1:]), kwargs
        return args, {**kwargs, site.callbacks_name: merged}


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def scalar(value: Any) -> Any:
    """Return ``value`` if it is a loggable scalar (number or 0-d tensor/array), else ``None``."""
    if isinstance(value, numbers.Real):
        return None if isinstance(value, bool) else value
    dtype = getattr(value, "dtype", None)
    number = getattr(value, "ndim", None) == 0 and hasattr(value, "item") and not getattr(dtype, "is_complex", False)
    return value if number and str(dtype) not in ("torch.bool", "bool") else None


def scalars(items: Any, prefix: str = "") -> dict[str, Any]:
    """The scalar entries of a mapping, keys as strings (``prefix`` prepended)."""
    if not hasattr(items, "items"):
        return {}
    return {f"{prefix}{key}": number for key, value in items.items() if (number := scalar(value)) is not None}


def _pair(at: int, key: str, value: str) -> Any:
    """The extract of a call logging one value: its name at ``at`` (or keyword ``key``), its value after it."""
    def extract(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        name, number = _arg(args, kwargs, at, key), scalar(_arg(args, kwargs, at + 1, value))
        return {str(name): number} if number is not None and name is not None else {}

    return extract


def method_dict(name: str, at: int = 1) -> Any:
    """The extract of a call logging a mapping: argument ``at`` (first after ``self``), keyword ``name``."""
    return lambda args, kwargs: scalars(_arg(args, kwargs, at, name))


def tapped(wing: Any, site: Site, original: Any) -> Any:
    """The wrapper of a logging call: the call goes on unchanged, its scalars are recorded after it returns."""
    gate, taps, library = wing.gate, wing.taps, site.tap
    extract = site.extract or (lambda args, kwargs: {})

    @functools.wraps(original)
    def tapped(*args: Any, **kwargs: Any) -> Any:
        if not gate.here() or gate.depth or library in taps.disabled:
            return original(*args, **kwargs)
        values: dict[str, Any] | None = None
        try:
            values = extract(args, kwargs)
        except Exception as exc:
            taps.warn(library, f"{library} tap disabled: {exc!r}")
        gate.depth += 1
        try:
            result = original(*args, **kwargs)
        finally:
            gate.depth -= 1
        if values:
            taps.record(library, values)
        return result

    return tapped


_TB_SCALARS = (("add_scalar", _pair(1, "tag", "scalar_value")), ("add_scalars", lambda args, kwargs: scalars(
    _arg(args, kwargs, 2, "tag_scalar_dict"), f"{_arg(args, kwargs, 1, 'main_tag')}/")))
_ML_METRICS = (("log_metric", _pair(0, "key", "value")), ("log_metrics", method_dict("metrics", 0)))


class Loggers(Adapter):
    """W&B, TensorBoard, tensorboardX and MLflow: logger taps only (no fit, no control)."""

    sites = (
        Site(tap="wandb", module="wandb.sdk.wandb_run", owner="Run", attr="log", extract=method_dict("data")),
        *(Site(tap=library, module=f"{package}.writer", owner="SummaryWriter", attr=attr, extract=extract)
          for library, package in (("tensorboard", "torch.utils.tensorboard"), ("tensorboardX", "tensorboardX"))
          for attr, extract in _TB_SCALARS),
        *(Site(tap="mlflow", module=module, owner="", attr=attr, extract=extract)
          for module in ("mlflow.tracking.fluent", "mlflow") for attr, extract in _ML_METRICS),
    )

    def after_wrap(self, site: Site, owner: Any) -> None:
        """``wandb.log`` bound to a run before the start still points at the original method: bound again."""
        if site.tap != "wandb":
            return
        wandb = sys.modules.get("wandb")
        bound = getattr(wandb, "log", None)
        original = getattr(vars(owner).get("log"), "__trainmeter_original__", None)
        if isinstance(bound, MethodType) and original is not None and bound.__func__ is original:
            self.wing.patches.set(wandb, "log", MethodType(vars(owner)["log"], bound.__self__))
