"""The loggers' adapter: series the loop already logs through W&B, TensorBoard (and tensorboardX) and MLflow
(docs/spec.md section 11). The call is unchanged; its scalars are recorded after it returns, by the outermost call.
"""

from __future__ import annotations

import functools
import numbers
import sys
from types import MethodType
from typing import Any

from trainmeter.integrations.adapter import Adapter, Site


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


def _tb_scalars(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    main = _arg(args, kwargs, 1, "main_tag")
    return scalars(_arg(args, kwargs, 2, "tag_scalar_dict"), f"{main}/")


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


_TB_SCALARS = (("add_scalar", _pair(1, "tag", "scalar_value")), ("add_scalars", _tb_scalars))
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
