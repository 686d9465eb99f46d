"""Steps no torch.optim hook sees: ``tm.step()`` and a framework's own step event, counted as optimizer steps.

They reach the probes through a :class:`Stepper` (docs/spec.md section 11). Training thread.
"""

from __future__ import annotations

from typing import Any

from trainmeter.core.host_patches import blind_message


class Stepper:
    """A stand-in optimizer stepped by ``source`` (``"tm.step"``, ``"keras"``): ``param_groups`` of the trained
    parameters, no ``step`` of its own."""

    __slots__ = ("source", "param_groups", "__weakref__")

    def __init__(self, source: str, params: list[Any]) -> None:
        self.source = source
        self.param_groups = [{"params": list(params)}]


def trained_parameters(model: Any) -> list[Any]:
    """The parameters of ``model`` that require a gradient (none when it has no ``parameters``)."""
    try:
        return [p for p in model.parameters() if getattr(p, "requires_grad", False)]
    except Exception:
        return []


def stepper(monitor: Any, source: str, model: Any = None) -> Stepper:
    """The run's probes' stepper for ``source`` and ``model`` (made once); without probes a fresh one."""
    probes = monitor.probes
    if probes is None:
        return Stepper(source, trained_parameters(model) if model is not None else [])
    return probes.stepper(source, model)


def hold_rate(monitor: Any, source: str, model: Any, rate: Any) -> None:
    """The rate ``source``'s own optimizer applies at this step (a float or 0-d tensor, as it holds it; ``None``:
    unknown), held as ``"lr"`` in its stepper's group, where the optim wing reads a rate (docs/spec.md section 2)."""
    if rate is not None and monitor is not None:
        stepper(monitor, source, model).param_groups[0]["lr"] = rate


def explicit_step(monitor: Any, source: str = "tm.step", model: Any = None, samples: int | None = None) -> None:
    """Count one optimizer step of ``source`` (``model``: what it trains; ``samples``: the batch size, used when
    the probes counted nothing this step). Without probes the step is counted with no tokens. Never raises."""
    try:
        probes = monitor.probes
        if probes is None:
            monitor.on_step(0)
            return
        primary = probes.primary_optimizer
        if source == "tm.step" and primary is not None and not isinstance(primary, Stepper):
            monitor.warn_once("explicit-step-torch", f"tm.step() ignored: the steps of {type(primary).__name__} "
                              "(torch.optim) are counted already; tm.step() is for updates no torch optimizer makes")
            return
        if model is None:
            model = probes.declared_model()
        found = probes.stepper(source, model)
        if samples and probes.count_samples(int(samples)):
            monitor.set_token_unit("samples")
        probes.step(found)
    except Exception as exc:
        monitor.warn_once("explicit-step", f"tm.step() disabled: {exc!r}")


def scaled_loss(monitor: Any, out: Any, scale: Any, loss: Any) -> None:
    """A framework multiplied ``loss`` by ``scale`` (a float or 0-d tensor) into ``out`` before backward: ``out``'s
    backward is divided by it, as a GradScaler's (docs/spec.md section 2, "Loss"). Never raises."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return
    try:
        from trainmeter.core.loss_capture import _divided

        probes.note_scaled(out, scale, _divided(getattr(loss, "grad_fn", None)))
    except Exception as exc:
        monitor.warn_once("scaled-loss", f"a framework's loss scale is not divided out: {exc!r}")


def backward_seen(monitor: Any) -> bool:
    """Whether a loss was passed to backward since the last counted step (or ever, with no step)."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return False
    try:
        return bool(probes.backward_seen())
    except Exception:
        return False


def steps_unknown(monitor: Any) -> bool:
    """Backward calls were seen and no optimizer step was ever counted: the step count is unknown."""
    return getattr(monitor, "steps", None) == 0 and backward_seen(monitor)


def unseen_message(monitor: Any) -> str:
    """The one warning for a loop whose updates trainmeter cannot see (a step source switched off: that switch)."""
    blind = blind_message()
    if blind is not None:
        return blind
    unit = getattr(monitor, "token_unit", "tokens") or "tokens"
    return (f"backward was called but no optimizer step trainmeter knows came (an optimizer that is not torch.optim): "
            f"steps, {unit} and the loss are not counted; call tm.step() after each update (or train through a "
            "framework trainmeter adapts: Hugging Face, Lightning, Keras, fastai, accelerate)")
