"""Steps no torch.optim hook sees: ``tm.step()`` and a framework's own step event, counted as optimizer steps.

A framework whose optimizer is not a ``torch.optim.Optimizer`` (fastai's, Keras 3's on the torch
backend) or a loop that says ``tm.step()`` itself reaches the probes through a :class:`Stepper`: a
stand-in optimizer whose ``param_groups`` name the trained parameters, so the probes find the root
from its calls, credit its batches and the losses passed to backward since the last step exactly as
for a torch optimizer (docs/spec.md section 11). One stepper per source and model, kept for the run.

:func:`scaled_loss` tells the probes that a framework multiplied the loss by a scale before backward
(Keras' loss scaling), so the step's loss is divided by it as a GradScaler's is.

:func:`steps_unknown` says whether backward calls were seen while no optimizer step ever came: the
passport then says "steps unknown" instead of "completed after 0 steps" with a goodput.

Thread safety: training thread (the thread that calls backward and steps).
"""

from __future__ import annotations

import weakref
from typing import Any

UNSEEN_MESSAGE = ("backward was called but no optimizer step trainmeter knows came (an optimizer that is not "
                  "torch.optim): steps, {unit} and the loss are not counted; call tm.step() after each update "
                  "(or train through a framework trainmeter adapts: Hugging Face, Lightning, Keras, fastai, "
                  "accelerate)")


class Stepper:
    """A stand-in optimizer for the probes: ``param_groups`` of the trained parameters, no ``step`` of its own.

    Attributes:
        source: Who steps it (``"tm.step"``, ``"keras"``, ``"fastai"``).
        param_groups: ``[{"params": [...]}]``, the parameters the model trains (may be empty).
    """

    __slots__ = ("source", "param_groups", "__weakref__")

    def __init__(self, source: str, params: list[Any]) -> None:
        self.source = source
        self.param_groups = [{"params": list(params)}]


_STEPPERS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], Stepper]] = weakref.WeakKeyDictionary()


def _trained_params(model: Any) -> list[Any]:
    try:
        return [p for p in model.parameters() if getattr(p, "requires_grad", False)]
    except Exception:
        return []


def stepper(monitor: Any, source: str, model: Any = None) -> Stepper:
    """The run's stepper for ``source`` and ``model``, made (and ``model`` watched as a candidate) once."""
    steppers = _STEPPERS.setdefault(monitor, {})
    key = (source, id(model) if model is not None else 0)
    found = steppers.get(key)
    if found is not None:
        return found
    found = steppers[key] = Stepper(source, _trained_params(model) if model is not None else [])
    probes = monitor.probes
    if probes is not None and model is not None:
        # as at a torch optimizer's construction (core/discovery.py): the model becomes a candidate
        probes._events += 1
        probes._created[id(found)] = (weakref.ref(found), probes._events)
        probes.hot.steady = False
        probes._watch_owners(found, [model])
        if probes._primary is None:  # the first to step: no torch optimizer's root is dropped for it
            probes._primary = weakref.ref(found)
    return found


def explicit_step(monitor: Any, source: str = "tm.step", model: Any = None, samples: int | None = None) -> None:
    """Count one optimizer step of ``source`` (``model``: what it trains, to find the root and count its batches).

    ``samples``: the batch size the framework was given, used when the probes counted nothing this step
    (a batch that reached the model as a NumPy array). Without probes (no torch) the step is counted with
    no tokens. Never raises.
    """
    try:
        probes = monitor.probes
        if probes is None:
            monitor.on_step(0)
            return
        primary = probes._primary() if probes._primary is not None else None
        if source == "tm.step" and primary is not None and not isinstance(primary, Stepper):
            monitor.warn_once("explicit-step-torch", f"tm.step() ignored: the steps of {type(primary).__name__} "
                              "(torch.optim) are counted already; tm.step() is for updates no torch optimizer makes")
            return
        if model is None and probes._declared is not None:
            model = probes._declared()
        found = stepper(monitor, source, model)
        if samples and not probes.hot.pending_tokens:
            probes.hot.pending_tokens = int(samples)
            monitor.set_token_unit("samples")
        probes._on_step(found, (), {})
    except Exception as exc:
        monitor.warn_once("explicit-step", f"tm.step() disabled: {exc!r}")


def scaled_loss(monitor: Any, out: Any, scale: Any, loss: Any) -> None:
    """A framework multiplied ``loss`` by ``scale`` into ``out`` before backward (Keras' ``LossScaleOptimizer``,
    ``loss_scale_factor``): ``out``'s backward is divided by ``scale``, as a GradScaler's (docs/spec.md section 2,
    "Loss"). ``scale``: a float or a 0-d tensor (read like the loss). Training thread; never raises."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return
    try:
        from trainmeter.core.loss_capture import _divided

        probes._note_scaled(out, scale, _divided(getattr(loss, "grad_fn", None)))
    except Exception as exc:
        monitor.warn_once("scaled-loss", f"a framework's loss scale is not divided out: {exc!r}")


def pending_parts(monitor: Any) -> int:
    """How many values were passed to backward since the last counted step (0 without probes)."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return 0
    loss = probes._loss
    return len(loss.parts) if loss is not None else int(probes.hot.fast_parts)


def scale_pending(monitor: Any, factor: float) -> bool:
    """Multiply the pending step's loss by ``factor`` (a framework's short accumulation step, docs/spec.md section 11).

    Returns whether it was done: the parts must be on the host already (a CUDA part not yet read is left alone).
    """
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return False
    loss = probes._loss
    if loss is None:
        if not probes.hot.fast_parts:
            return False
        probes.hot.fast_sum *= factor
        return True
    if any(part[0] is None for part in loss.parts):
        return False
    for part in loss.parts:
        part[0] *= factor
    return True


def backward_seen(monitor: Any) -> bool:
    """Whether a loss was passed to backward since the last counted step (or ever, with no step)."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return False
    try:
        return probes._loss is not None or bool(probes.hot.fast_parts) or bool(probes.unstepped_loss)
    except Exception:
        return False


def steps_unknown(monitor: Any) -> bool:
    """Backward calls were seen and no optimizer step was ever counted: the step count is unknown."""
    return getattr(monitor, "steps", None) == 0 and backward_seen(monitor)


def unseen_message(monitor: Any) -> str:
    """The one warning for a loop whose updates trainmeter cannot see."""
    return UNSEEN_MESSAGE.format(unit=getattr(monitor, "token_unit", "tokens") or "tokens")
