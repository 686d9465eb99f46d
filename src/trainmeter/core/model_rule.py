"""The model rule: which module is the trained model, whose calls are its batches, and what it trains
(docs/spec.md section 2, "The model rule"). Read by discovery (core/discovery.py); training thread."""

from __future__ import annotations

from typing import Any

from trainmeter.core.reachable import trained_params

MODEL_SHARE = 0.5  # the model holds at least this share of the optimizer's parameters: a head never is the model


def holds(model: Any, module: Any) -> bool:
    """Whether ``module`` is ``model`` or one of its submodules."""
    return any(m is module for m in model.modules())


def trained_in(model: Any, optimizers: list[Any]) -> int:
    """Elements of ``model``'s parameters that any of ``optimizers`` trains, or (``model`` ``None``) of every parameter
    they train (each tensor once; ``None`` entries, optimizers gone, train none)."""
    trained: dict[int, int] = {}
    for optimizer in optimizers:
        if optimizer is not None:
            trained.update(trained_params(optimizer))
    if model is None:
        return sum(trained.values())
    return sum({id(p): p.numel() for p in model.parameters() if id(p) in trained}.values())


def others_only(primary: Any, optimizers: list[Any], candidates: dict[int, Any], root_id: int) -> set[int]:
    """Keys of the ``candidates`` (``id(module) -> candidate``, ``candidate.ref()`` the module) other than the root
    holding parameters of another of ``optimizers`` and none of ``primary``'s: a model another thread may train
    (docs/spec.md section 2, "Threads")."""
    mine = trained_params(primary) if primary is not None else {}
    others: set[int] = set()
    for optimizer in optimizers:
        if optimizer is not None and optimizer is not primary:
            others.update(trained_params(optimizer))
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
    """``"MlpExtractor inside ActorCriticPolicy"`` when the batches are read from a part of the model (the model is
    never called itself), else ``None``."""
    if root is None or model is None or root is model:
        return None
    return f"{type(root).__name__} inside {type(model).__name__}"


def no_root_message(declared: Any) -> str:
    """The warning when no root was found after the discovery steps: what was missing, and what to do
    (``declared``: the module passed as ``model=``, or ``None``)."""
    compiled = ("a model called only inside a torch.compile'd function is seen by Dynamo alone: compile the "
                "model itself, torch.compile(model), to have its batches counted)")
    if declared is not None:
        return (f"the model passed as model= ({type(declared).__name__}) was never seen called with gradients "
                f"enabled: tokens are not counted ({compiled}")
    return ("no module holding most of the optimizer's parameters, or a part of it, was seen called: tokens are "
            f"not counted (pass the model to tm.monitor(model=...); {compiled}")
