"""A copy of the user's model for the counted pass: on the meta device, never sharing or changing the live module.

How the separate module tree is built: docs/spec.md section 5, "The counted pass". Nothing of the live module is
written. Call on the training thread between steps.
"""

from __future__ import annotations

import copy
import types
from collections import OrderedDict
from typing import Any

_WRAPPERS = ("DistributedDataParallel", "DataParallel")
_COMPOSABLE_KEY = "__composable_api_state_key"
_DETACHED_KEYS = ("_trainer", "_fabric", "_device_mesh")  # a LightningModule's links to its run
_DETACHED_CLASSES = frozenset({"Trainer", "LightningDataModule", "Dataset", "IterableDataset", "DataLoader", "Fabric",
                               "Optimizer"})  # an optimizer a module holds (SB3's policy): its state is not copied


def _detached(key: str, value: Any) -> bool:
    """Whether an attribute is a link to the run (a trainer, the data, an optimizer) that the copy holds as ``None``."""
    if value is None or key in _DETACHED_KEYS:
        return value is not None
    try:
        return any(c.__name__ in _DETACHED_CLASSES for c in type(value).__mro__)
    except Exception:  # noqa: BLE001 - an odd class is copied as any other value
        return False


def unwrap(model: Any) -> Any:
    """The module whose forward does the work: through ``_orig_mod`` (compile) and ``.module`` (DDP, DP)."""
    root = model
    for _ in range(4):
        inner = getattr(root, "_orig_mod", None)
        if inner is None and type(root).__name__ in _WRAPPERS:
            inner = getattr(root, "module", None)
        if inner is None:
            break
        root = inner
    return root


def is_sharded(root: Any) -> bool:
    """True when a parameter is a DTensor or a module is FSDP-managed (FSDP2 ``fully_shard`` or FSDP1)."""
    fsdp = {"FSDPModule", "FullyShardedDataParallel"}
    return any(fsdp & {c.__name__ for c in type(module).__mro__} for module in root.modules()) or any(
        type(p).__name__ == "DTensor" or hasattr(p, "_local_tensor") for p in root.parameters())


def _plain_class(module: Any) -> type:
    """The user's class of ``module``: ``FSDP<Class>`` (FSDP2's dynamic subclass) read as ``<Class>``."""
    return next(c for c in type(module).__mro__ if all(b.__name__ != "FSDPModule" for b in c.__mro__))


def _tensor_copy(t: Any, torch: Any, real: bool) -> Any:
    """A new tensor like ``t`` (same shape, dtype, ``requires_grad``): meta, or a detached clone for ``real``."""
    grad = bool(t.requires_grad)
    local = t.detach().clone() if real else torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(local, requires_grad=grad)
    return local.requires_grad_(grad) if grad and local.is_floating_point() else local


def _memo(root: Any, torch: Any, real: bool) -> dict[int, Any]:
    """The deepcopy memo: tensors (parameters, buffers, those in attributes) to new tensors, hook dictionaries and
    FSDP2 state to empty ones."""
    memo: dict[int, Any] = {}
    for module in root.modules():
        for key, value in vars(module).items():
            if key.startswith(_COMPOSABLE_KEY) or ("hooks" in key and isinstance(value, dict)):
                memo[id(value)] = type(value)() if isinstance(value, OrderedDict) else {}
            elif _detached(key, value):
                memo[id(value)] = None
            elif not isinstance(value, torch.nn.Module):
                _scan(value, memo, torch, real, 0)
    return memo


def _scan(value: Any, memo: dict[int, Any], torch: Any, real: bool, depth: int) -> None:
    """Map the tensors in an attribute (a rotary cache, a mask, a distribution's logits kept from the last forward;
    inside lists, tuples, dicts and plain objects, 4 levels deep) to new ones in ``memo``, like buffers: the deep copy
    of the rest then allocates nothing on a device and copies no autograd graph."""
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = _tensor_copy(value, torch, real)
    elif depth < 4 and isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            _scan(item, memo, torch, real, depth + 1)
    elif depth < 4 and isinstance(getattr(value, "__dict__", None), dict) and not isinstance(
            value, (type, types.ModuleType, torch.nn.Module)) and not _detached("", value):
        for item in vars(value).values():
            _scan(item, memo, torch, real, depth + 1)


def _clone_module(module: Any, memo: dict[int, Any], module_type: type) -> Any:
    """A new module of ``module``'s plain class whose attributes are deep copies (through ``memo``); children likewise,
    so a class's own ``__deepcopy__`` (FSDP2 refuses one) and ``__new__`` (FSDP2's re-runs ``__init__``) never run."""
    found = memo.get(id(module))
    if found is not None:
        return found
    new = object.__new__(_plain_class(module))
    memo[id(module)] = new
    state = new.__dict__
    for key, value in vars(module).items():
        if key == "_modules":
            state[key] = {name: None if child is None else _clone_module(child, memo, module_type)
                          for name, child in value.items()}
        elif isinstance(value, module_type):
            state[key] = _clone_module(value, memo, module_type)
        else:
            state[key] = copy.deepcopy(value, memo)
    return new


def _from_config(root: Any, torch: Any) -> Any:
    """Rebuild ``root`` from its Hugging Face style ``config`` on the meta device, or raise."""
    config = getattr(root, "config", None)
    if config is None:
        raise TypeError("it has no config to rebuild it from")
    cls = _plain_class(root)
    with torch.device("meta"):
        build = getattr(cls, "_from_config", None)
        rebuilt = build(config) if callable(build) else cls(config)
    live = {name: p.requires_grad for name, p in root.named_parameters()}
    for name, p in rebuilt.named_parameters():
        p.requires_grad_(live.get(name, True))
    rebuilt.train(root.training)
    return rebuilt


def model_copy(model: Any, *, real: bool = False) -> tuple[Any, str, str | None]:
    """A copy of ``model`` (wrappers read through) for the counted pass, ``real``: its data cloned (the CPU's real
    pass): ``(copy, how, None)``, ``how`` "meta copy", "real copy" or "rebuilt from its config on the meta device";
    or ``(None, "", reason)``. Never raises."""
    try:
        import torch

        root = unwrap(model)
        sharded = is_sharded(root)
        if sharded and real:
            return None, "", "the model is sharded (FSDP / DTensor parameters): only a meta copy is counted"
        try:
            memo = _memo(root, torch, real)
            clone = _clone_module(root, memo, torch.nn.Module)
            return clone, "real copy" if real else "meta copy", None
        except Exception as exc:  # noqa: BLE001 - an uncopyable model is counted from its config or skipped
            copy_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if real:
            return None, "", f"the model could not be copied ({copy_error})"
        try:
            return _from_config(root, torch), "rebuilt from its config on the meta device", None
        except Exception as exc:  # noqa: BLE001
            why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TypeError) else str(exc)
            return None, "", f"the model could not be copied ({copy_error}) and {why}"
    except Exception as exc:  # noqa: BLE001 - never raise into training code
        return None, "", f"the model could not be read: {type(exc).__name__}: {exc}"
