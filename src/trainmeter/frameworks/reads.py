"""Reads of a framework's own objects: its step count at a fit's end, a batch's rows, its optimizer's kind and scale.

Attribute and shape reads only, never raising (``None`` or ``False`` for what cannot be read). Training thread.
"""

from __future__ import annotations

import sys
from typing import Any


def framework_steps(framework: str, target: Any) -> int | None:
    """The framework's own optimizer-step count at the fit's end, or ``None``."""
    try:
        if framework == "hf":
            return int(target.state.global_step)
        if framework == "lightning":
            return int(target.global_step)
        if framework == "keras":
            return int(target.optimizer.iterations)
        if framework == "fastai":
            return int(target.train_iter)
    except Exception:
        return None
    return None


def rows(x: Any) -> int | None:
    """Rows of a batch given as an array (``train_on_batch(x, y)``), or ``None``."""
    try:
        shape = getattr(x, "shape", None)
        return int(shape[0]) if shape is not None and len(shape) >= 1 else None
    except Exception:
        return None


def keras_loss_scale(optimizer: Any) -> Any:
    """The factor a Keras optimizer's ``scale_loss`` multiplied the loss by, as its own code reads it: a
    ``LossScaleOptimizer``'s dynamic scale (its variable's tensor once built, else ``initial_scale``), else
    ``loss_scale_factor``; ``None`` when it does not scale."""
    try:
        if hasattr(optimizer, "dynamic_scale") or hasattr(optimizer, "inner_optimizer"):
            if getattr(optimizer, "built", False):
                variable = optimizer.dynamic_scale
                return getattr(variable, "value", variable)
            return float(optimizer.initial_scale)
        factor = getattr(optimizer, "loss_scale_factor", None)
        return None if factor is None else float(factor)
    except Exception:
        return None


def torch_optimizer(opt: Any) -> bool:
    """Whether a fastai learner's optimizer is a torch one (``OptimWrapper``): its steps are hooked already."""
    torch = sys.modules.get("torch")
    if torch is None or opt is None:
        return False
    inner = getattr(opt, "opt", opt)
    return isinstance(inner, torch.optim.Optimizer)
