"""Taps: series the training loop already logs, recorded with no code change.

While a run is active, these calls also record their scalars through
``monitor.record`` (at the monitor's current step):

| library | patched | names recorded |
| --- | --- | --- |
| W&B | ``wandb.sdk.wandb_run.Run.log`` (and ``wandb.log`` if bound to a run before the start) | dict keys |
| TensorBoard | ``torch.utils.tensorboard.writer.SummaryWriter.add_scalar/add_scalars`` | ``tag``; ``main/tag`` |
| tensorboardX | the same in ``tensorboardX.writer`` | ``tag``; ``main/tag`` |
| MLflow | ``mlflow.log_metric/log_metrics`` and ``mlflow.tracking.fluent``'s | ``key``; dict keys |
| Hugging Face | ``transformers.trainer.Trainer.log`` | dict keys (``loss``, ``eval_loss``, ...) |
| Lightning | ``_LoggerConnector.log_metrics`` of ``lightning.pytorch`` / ``pytorch_lightning`` | dict keys |

Libraries already imported are patched at :meth:`Taps.start`; the others are
patched right after they are imported during the run, by a ``sys.meta_path``
post-import hook (nothing is imported by trainmeter). Only scalars are taken
(int, float, numpy scalars, 0-d tensors; not bools). A call made while another
tapped call is in progress (the Trainer's log going on to TensorBoard) is
recorded once, by the outermost tap. Only calls on the training thread of the
training process are recorded.

Series names are the logged keys, except the names trainmeter measures itself
(``train_loss``, ``tokens_per_step``): a Lightning ``self.log("train_loss")`` becomes
``lightning.train_loss``, so one series never holds two quantities. A logged ``grad_norm``
(Hugging Face's) is left out while trainmeter records its own from the same ``clip_grad_norm_``,
so the series has one point per step. Each tapped series
gets a ``series_info`` entry naming the library. A run-level summary a framework logs
once at the end (Hugging Face's ``train_runtime``, ``train_loss``, ...: a ``Trainer.log``
call carrying ``train_runtime``) is kept as summary values in ``passport.json["taps"]``,
not as points.

The library's behaviour is unchanged: the wrapper calls the original with the
same arguments, returns its value and lets its exception through unchanged;
the scalars are recorded after the call returns, and a fault in the tap warns
once and disables that tap.
"""

from __future__ import annotations

import functools
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import MethodType, ModuleType
from typing import TYPE_CHECKING, Any

from trainmeter.core import host_patches
from trainmeter.core.patches import Gate, Patches, PostImportHooks
from trainmeter.core.extension import ExtensionBase, Report

if TYPE_CHECKING:
    from trainmeter.core.monitor import Monitor

Extract = Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]
OWN_SERIES = ("train_loss", "tokens_per_step")  # measured by trainmeter: a logged key of that name is prefixed
MEASURED_TWICE = ("grad_norm",)  # also read by trainmeter from the same clip_grad_norm_: one point per step
SUMMARY_KEYS = {"transformers": "train_runtime"}  # a call carrying this key is the run's end summary


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def scalar(value: Any) -> Any:
    """Return ``value`` if it is a loggable scalar (number or 0-d tensor/array), else ``None``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, numbers.Real):
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        dtype = getattr(value, "dtype", None)
        if getattr(dtype, "is_complex", False) or str(dtype) in ("torch.bool", "bool"):
            return None
        return value
    return None


def scalars(items: Any, prefix: str = "") -> dict[str, Any]:
    """The scalar entries of a mapping, keys as strings (``prefix`` prepended)."""
    out: dict[str, Any] = {}
    if not hasattr(items, "items"):
        return out
    for key, value in items.items():
        number = scalar(value)
        if number is not None:
            out[f"{prefix}{key}"] = number
    return out


def _one(name: Any, value: Any) -> dict[str, Any]:
    number = scalar(value)
    return {str(name): number} if number is not None and name is not None else {}


def _tb_scalar(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _one(_arg(args, kwargs, 1, "tag"), _arg(args, kwargs, 2, "scalar_value"))


def _tb_scalars(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    main = _arg(args, kwargs, 1, "main_tag")
    return scalars(_arg(args, kwargs, 2, "tag_scalar_dict"), f"{main}/")


def _method_dict(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> dict[str, Any]:
    return scalars(_arg(args, kwargs, 1, name))


def _mlflow_metric(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _one(_arg(args, kwargs, 0, "key"), _arg(args, kwargs, 1, "value"))


def _mlflow_metrics(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return scalars(_arg(args, kwargs, 0, "metrics"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TapTarget:
    """One patched call site.

    Attributes:
        library: Name shown in warnings and the passport (``"tensorboard"``).
        module: Full module name holding ``owner`` (patched once it is imported).
        owner: Class name inside ``module``, or ``""`` for a module-level function.
        attr: Attribute to wrap.
        extract: ``(args, kwargs) -> {name: scalar}`` for one call.
    """

    library: str
    module: str
    owner: str
    attr: str
    extract: Extract


_LC = "trainer.connectors.logger_connector.logger_connector"
TARGETS: tuple[TapTarget, ...] = (
    TapTarget(library="wandb", module="wandb.sdk.wandb_run", owner="Run", attr="log",
              extract=lambda a, k: _method_dict(a, k, "data")),
    TapTarget(library="tensorboard", module="torch.utils.tensorboard.writer", owner="SummaryWriter",
              attr="add_scalar", extract=_tb_scalar),
    TapTarget(library="tensorboard", module="torch.utils.tensorboard.writer", owner="SummaryWriter",
              attr="add_scalars", extract=_tb_scalars),
    TapTarget(library="tensorboardX", module="tensorboardX.writer", owner="SummaryWriter",
              attr="add_scalar", extract=_tb_scalar),
    TapTarget(library="tensorboardX", module="tensorboardX.writer", owner="SummaryWriter",
              attr="add_scalars", extract=_tb_scalars),
    TapTarget(library="mlflow", module="mlflow.tracking.fluent", owner="", attr="log_metric", extract=_mlflow_metric),
    TapTarget(library="mlflow", module="mlflow.tracking.fluent", owner="", attr="log_metrics",
              extract=_mlflow_metrics),
    TapTarget(library="mlflow", module="mlflow", owner="", attr="log_metric", extract=_mlflow_metric),
    TapTarget(library="mlflow", module="mlflow", owner="", attr="log_metrics", extract=_mlflow_metrics),
    TapTarget(library="transformers", module="transformers.trainer", owner="Trainer", attr="log",
              extract=lambda a, k: _method_dict(a, k, "logs")),
    TapTarget(library="lightning", module=f"lightning.pytorch.{_LC}", owner="_LoggerConnector",
              attr="log_metrics", extract=lambda a, k: _method_dict(a, k, "metrics")),
    TapTarget(library="lightning", module=f"pytorch_lightning.{_LC}", owner="_LoggerConnector",
              attr="log_metrics", extract=lambda a, k: _method_dict(a, k, "metrics")),
)


class Taps(ExtensionBase):
    """The logger taps of one run (extension ``"taps"``).

    Args:
        enabled: ``options.tap``; ``False`` (``--no-tap``) installs nothing.
        targets: Call sites to tap (tests pass their own).
        watch_imports: Also patch watched libraries imported during the run.

    Thread safety: ``start``/``stop`` on the training thread; ``panels`` and
    ``warnings`` read counters only (any thread).
    """

    name = "taps"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, enabled: bool = True, *, targets: tuple[TapTarget, ...] = TARGETS,
                 watch_imports: bool = True) -> None:
        self.enabled = enabled
        self._targets = targets
        self._watch = watch_imports
        self._monitor: Monitor | None = None
        self._gate = Gate()
        self._patches = Patches()
        self._hooks: PostImportHooks | None = None
        self._disabled: set[str] = set()
        self.tapped: dict[str, int] = {}  # library -> calls recorded
        self.points: dict[str, int] = {}  # library -> scalars recorded
        self.patched: list[str] = []  # "module:owner.attr" patched during the run
        self.summaries: dict[str, dict[str, float]] = {}  # library -> run-level summary values

    # -- lifecycle -----------------------------------------------------------------
    def start(self, monitor: Monitor) -> None:
        """Patch libraries already imported and watch for the others."""
        self._monitor = monitor
        if not self.enabled or not host_patches.allow("taps", monitor.warn_once):
            return
        self._gate.open()
        by_module: dict[str, list[TapTarget]] = {}
        for target in self._targets:
            by_module.setdefault(target.module, []).append(target)
        callbacks = {name: functools.partial(self._patch_module, targets) for name, targets in by_module.items()}
        self._hooks = PostImportHooks(callbacks)
        if self._watch:
            self._hooks.install()
        else:
            for name, callback in callbacks.items():
                if name in sys.modules:
                    callback(sys.modules[name])

    def stop(self) -> None:
        """Remove the import hook and every patch. Idempotent."""
        self._gate.close()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self._patches.restore_all()
        self._monitor = None

    # -- patching ------------------------------------------------------------------
    def _patch_module(self, targets: list[TapTarget], module: ModuleType) -> None:
        if not self._gate.active:
            return
        for target in targets:
            owner: Any = module
            if target.owner:
                owner = getattr(module, target.owner, None)
                if not isinstance(owner, type):
                    continue
            try:
                if self._patches.wrap(owner, target.attr, functools.partial(self._make_wrapper, target)):
                    self.patched.append(f"{target.module}:{target.owner + '.' if target.owner else ''}{target.attr}")
                    if target.library == "wandb":
                        self._rebind_wandb_log(owner)
            except Exception as exc:
                self._warn(target.library, f"tap on {target.module}.{target.attr} not installed: {exc!r}")

    def _rebind_wandb_log(self, run_class: type) -> None:
        """``wandb.log`` bound to a run before the start still points at the original method."""
        wandb = sys.modules.get("wandb")
        bound = getattr(wandb, "log", None)
        original = getattr(vars(run_class).get("log"), "__trainmeter_original__", None)
        if isinstance(bound, MethodType) and original is not None and bound.__func__ is original:
            self._patches.set(wandb, "log", MethodType(vars(run_class)["log"], bound.__self__))

    def _make_wrapper(self, target: TapTarget, original: Any) -> Any:
        gate = self._gate
        taps = self

        @functools.wraps(original)
        def tapped(*args: Any, **kwargs: Any) -> Any:
            if not gate.here() or gate.depth or target.library in taps._disabled:
                return original(*args, **kwargs)
            values: dict[str, Any] | None = None
            try:
                values = target.extract(args, kwargs)
            except Exception as exc:
                taps._warn(target.library, f"{target.library} tap disabled: {exc!r}")
            gate.depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                gate.depth -= 1
            if values:
                taps._record(target.library, values)
            return result

        return tapped

    def _record(self, library: str, values: dict[str, Any]) -> None:
        monitor = self._monitor
        if monitor is None:
            return
        try:
            summary_key = SUMMARY_KEYS.get(library)
            if summary_key is not None and summary_key in values:
                self.summaries.setdefault(library, {}).update(
                    {k: float(v) for k, v in values.items() if isinstance(v, (int, float))})
                self.tapped[library] = self.tapped.get(library, 0) + 1
                return
            values = {(f"{library}.{k}" if k in OWN_SERIES else k): v for k, v in values.items()
                      if not (k in MEASURED_TWICE and k in monitor.series)}
            info = monitor.series_info
            for name in values:
                if name not in info:
                    info[name] = {"provenance": "measured", "source": f"logged through {library} (tap)"}
            monitor.record(values)
            self.tapped[library] = self.tapped.get(library, 0) + 1
            self.points[library] = self.points.get(library, 0) + len(values)
        except Exception as exc:
            self._warn(library, f"{library} tap disabled: {exc!r}")

    def _warn(self, library: str, message: str) -> None:
        self._disabled.add(library)
        if self._monitor is not None:
            self._monitor.warn_once(f"tap-{library}", message)

    # -- sinks ---------------------------------------------------------------------
    def passport_section(self) -> dict[str, Any]:
        """``passport.json["taps"]``: which call sites were patched and what they recorded."""
        return {"enabled": self.enabled, "patched": sorted(set(self.patched)), "calls": dict(self.tapped),
                "scalars": dict(self.points), "disabled": sorted(self._disabled),
                "summaries": {k: dict(v) for k, v in self.summaries.items()}}

    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["taps"]``: calls recorded so far per library."""
        return {"calls": dict(self.tapped)}

    def panels(self) -> list[dict[str, Any]]:
        """A "Logger taps" panel once a tap has recorded something (publisher thread)."""
        calls = dict(self.tapped)
        if not calls:
            return []
        points = dict(self.points)
        rows = [{"label": library, "value": n, "unit": "count", "provenance": "counted",
                 "note": f"{points.get(library, 0)} scalars"} for library, n in sorted(calls.items())]
        return [{"id": "taps", "title": "Series from your loggers", "rows": rows,
                 "note": "picked up from logger calls (calls per library); --no-tap turns this off"}]
