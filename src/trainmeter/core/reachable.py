"""What the calling frames reach (their locals, those objects' attributes and list items, ``__main__``), read without
running code or changing layouts (docs/spec.md section 2, "What the start looks at"); the model rule: which module is
the trained model, whose calls are its batches, what it trains (section 2, "The model rule"). Training thread.
"""

from __future__ import annotations

import gc
import sys
from contextlib import suppress
from types import ModuleType
from typing import Any

MAX_FRAMES = 48
MAX_ATTRS = 256
MAX_NAMES = 4096  # names looked at per namespace (a long notebook's user namespace)
_PLAIN = (str, bytes, int, float, bool, type(None))
# Py_TPFLAGS_MANAGED_DICT (CPython 3.11 on; docs/spec.md section 2, "What the start looks at")
_MANAGED_DICT = 1 << 4 if sys.version_info >= (3, 11) else 0
_type_flags = type.__dict__["__flags__"].__get__  # a class's flags by the C getter: no metaclass code runs
_CONTAINERS = (dict, list, tuple, set, frozenset)


def _attribute_values(value: Any) -> list[Any]:
    """The values of ``value``'s instance attributes, at most :data:`MAX_ATTRS`. An instance whose attributes are in
    shared-keys values is read through ``gc.get_referents``, never by asking for ``__dict__`` (which would make one;
    docs/spec.md section 2, "What the start looks at"); other objects through their ``__dict__``. Never raises."""
    cls = type(value)
    # a subclass of a container traverses its items too (maybe millions): its __dict__ is the bounded read
    if _type_flags(cls) & _MANAGED_DICT and not issubclass(cls, _CONTAINERS):
        found: list[Any] = []
        for ref in gc.get_referents(value):
            if type(ref) is dict:  # the dict once made (or a dict an attribute holds): its values
                if len(ref) <= MAX_ATTRS:
                    found.extend(ref.values())
            elif ref is not cls:
                found.append(ref)
        return found[:MAX_ATTRS]
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except Exception:  # no __dict__ (slots), or an object that refuses to be looked at
        return []
    return list(attrs.values()) if type(attrs) is dict and len(attrs) <= MAX_ATTRS else []


def _instance(value: Any, kind: Any) -> bool:
    """``isinstance`` that never raises (a proxy whose ``__class__`` lookup fails is no match)."""
    try:
        return isinstance(value, kind)
    except Exception:
        return False


def reachable(frame: Any, module_type: Any) -> list[Any]:
    """Objects one step from the calling frames: locals, their attributes and list items, ``__main__``. Our own
    frames' locals are left out; classes, modules and ``module_type`` instances are not looked into."""
    found: dict[int, Any] = {}

    def add(value: Any) -> None:
        if len(found) < 4096:
            found.setdefault(id(value), value)

    namespaces: list[Any] = []
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        if not frame.f_globals.get("__name__", "").startswith("trainmeter"):
            namespaces.append(frame.f_locals)
        frame = frame.f_back
        depth += 1
    main = sys.modules.get("__main__")
    if main is not None:
        namespaces.append(vars(main))
    ipython = sys.modules.get("IPython")
    with suppress(Exception):  # the IPython user namespace (the notebook's globals)
        user_ns = getattr(ipython.get_ipython() if ipython is not None else None, "user_ns", None)
        if isinstance(user_ns, dict):
            namespaces.append(user_ns)
    for namespace in namespaces:
        for value in list(namespace.values())[:MAX_NAMES]:
            if type(value) in _PLAIN:
                continue
            try:
                add(value)
                if type(value) in (list, tuple):
                    for item in value[:16]:
                        add(item)
                elif not isinstance(value, (type, module_type, ModuleType)):
                    for item in _attribute_values(value):
                        add(item)
                        if type(item) in (list, tuple):
                            for inner in item[:16]:
                                add(inner)
            except Exception:
                continue  # no __dict__, or an object that refuses to be looked at
    return list(found.values())


def _is_lightning_module(module: Any) -> bool:
    return any(cls.__name__ == "LightningModule" for cls in type(module).__mro__)


def _torch_class(cls: type) -> bool:
    """A torch building block (``nn.Sequential``, ``nn.Linear``): also used inside compiled models."""
    return cls.__module__.startswith("torch.") and cls.__name__ != "OptimizedModule"


def _is_compiled(module: Any) -> bool:
    return type(module).__name__ == "OptimizedModule" and "_orig_mod" in getattr(module, "_modules", {})


def trained_params(optimizer: Any) -> dict[int, int]:
    """``id(parameter) -> numel`` of every parameter ``optimizer`` trains."""
    return {id(p): p.numel() for group in optimizer.param_groups for p in group["params"]}


def most_trained(trained: dict[int, int], modules: list[Any], called: frozenset[int] = frozenset(),
                 share: float = 0.0) -> int | None:
    """The index in ``modules`` of the one holding most of ``trained``; on a tie one in ``called``, then the larger.
    ``None`` when none holds any, or less than the ``share`` of it (a ``None`` entry holds none)."""
    best: tuple[int, bool, int, int] | None = None
    for index, module in enumerate(modules):
        if module is None:
            continue
        overlap = sum(trained.get(id(p), 0) for p in module.parameters())
        key = (overlap, id(module) in called, sum(1 for _ in module.modules()))
        if overlap and (best is None or key > best[:3]):
            best = (*key, index)
    return None if best is None or best[0] < share * sum(trained.values()) else best[3]


MODEL_SHARE = 0.5  # the model holds at least this share of the optimizer's parameters: a head never is the model


def holds(model: Any, module: Any) -> bool:
    """Whether ``module`` is ``model`` or one of its submodules."""
    return any(m is module for m in model.modules())


def trained_in(model: Any, optimizers: list[Any]) -> int:
    """Elements of ``model``'s parameters (``None``: of any) that any of ``optimizers`` trains, each tensor once."""
    trained = {k: n for optimizer in optimizers if optimizer is not None for k, n in trained_params(optimizer).items()}
    if model is None:
        return sum(trained.values())
    return sum({id(p): p.numel() for p in model.parameters() if id(p) in trained}.values())


def others_only(primary: Any, optimizers: list[Any], candidates: dict[int, Any], root_id: int) -> set[int]:
    """Keys of the ``candidates`` but the root holding parameters of another of ``optimizers`` and none of
    ``primary``'s: a model another thread may train (docs/spec.md section 2, "Threads")."""
    mine = trained_params(primary) if primary is not None else {}
    others = {i for optimizer in optimizers if optimizer is not None and optimizer is not primary
              for i in trained_params(optimizer)}
    kept: set[int] = set()
    for key, candidate in list(candidates.items()):
        module = candidate.ref()
        if key == root_id or module is None or not others:
            continue
        ids = [id(p) for p in module.parameters()]
        if any(i in others for i in ids) and not any(i in mine for i in ids):
            kept.add(key)
    return kept


def reader_name(root: Any, model: Any) -> str | None:
    """``"MlpExtractor inside ActorCriticPolicy"`` when the batches are read from a part of the model, else ``None``."""
    if root is None or model is None or root is model:
        return None
    return f"{type(root).__name__} inside {type(model).__name__}"


def no_root_message(declared: Any) -> str:
    """The warning when no root was found after the discovery steps (``declared``: ``model=``'s, or ``None``)."""
    compiled = ("a model called only inside a torch.compile'd function is seen by Dynamo alone: compile the "
                "model itself, torch.compile(model), to have its batches counted)")
    if declared is not None:
        return (f"the model passed as model= ({type(declared).__name__}) was never seen called with gradients "
                f"enabled: tokens are not counted ({compiled}")
    return ("no module holding most of the optimizer's parameters, or a part of it, was seen called: tokens are "
            f"not counted (pass the model to tm.monitor(model=...); {compiled}")
