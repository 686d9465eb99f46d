"""Optimizer steps off the steady path: the step hook's general path (:class:`OptimizerSteps`), and the steps no
torch.optim hook sees (``tm.step()``, a framework's step event) through a :class:`Stepper` (docs/spec.md section 11).
Training thread.
"""

from __future__ import annotations

import sys
import weakref
from contextlib import suppress
from threading import get_ident
from typing import Any

from trainmeter.core.faults import fault_site
from trainmeter.core.host_patches import blind_message
from trainmeter.core.steps import LOSS_SERIES


class Stepper:
    """A stand-in optimizer stepped by ``source`` (``"keras"``): ``param_groups`` of the trained parameters, no step."""

    __slots__ = ("source", "param_groups", "__weakref__")

    def __init__(self, source: str, params: list[Any]) -> None:
        self.source = source
        self.param_groups = [{"params": list(params)}]


def trained_parameters(model: Any) -> list[Any]:
    """The parameters of ``model`` that require a gradient (none when it has no ``parameters``: ``None``)."""
    try:
        return [p for p in model.parameters() if getattr(p, "requires_grad", False)]
    except Exception:
        return []


class OptimizerSteps:
    """The step post-hook's general path (ending in :meth:`StepRecorder.step
    <trainmeter.core.steps.StepRecorder.step>`, as the steady one does), and the run's framework steppers: counts
    ``general_steps`` (lane 1's steps counted here, not on the steady path) and ``max_calls`` (the most root calls in
    one step). Training thread."""

    def __init__(self, hot: Any, steps: Any, monitor: Any, threads: Any, discovery: Any, loss: Any) -> None:
        self._hot = hot
        self._steps = steps
        self._monitor = monitor
        self._threads = threads
        self._discovery = discovery
        self._loss = loss
        self.on_other_step: Any = None  # fn(number, optimizer) after another optimizer's step (optim/ reads its rate)
        self._steppers: dict[tuple[str, int], Stepper] = {}  # (source, id(model)) -> its stand-in optimizer
        self.max_calls = 0
        self.reset()

    def reset(self) -> None:
        """No other optimizer, no step counted here yet (a forked child's own run)."""
        self._others: dict[int, tuple[weakref.ReferenceType[Any], int]] = {}  # id -> (it, its number: 2, 3, ...)
        self._losses: set[int] = set()  # the numbers whose losses were kept
        self._numbered = 0  # numbers given
        self.general_steps = 0

    def other_numbers(self) -> list[int]:
        """The numbers (2, 3, ...) of the other optimizers whose losses were kept."""
        return sorted(self._losses)

    def on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The general path of the step post-hook (:meth:`Wrappers.step_hook` takes the steady one)."""
        hot = self._hot
        if not hot.active:
            return
        try:
            lane = self._threads.thread_lane()  # another training thread than lane 1's (ProbeThreads)
            if lane is not None:
                self._threads.lane_step(lane, optimizer)
                return
            callback = hot.on_training
            if callback is not None:  # an optimizer step ends an open eval span (the time split)
                callback()
            primary = hot.primary_optimizer()
            discovery = self._discovery
            if primary is not optimizer:
                if primary is not None and not discovery.is_newer(optimizer):
                    self._on_other_step(optimizer)
                    return
                hot.primary = weakref.ref(optimizer)  # the first, or a sweep's new optimizer
                self._others.pop(id(optimizer), None)
                discovery.new_primary()
            self.general_steps += 1
            discovery.on_primary_step(optimizer, sys._getframe(1))
            # the next steps of this optimizer may take the short path (see TorchProbes._refresh_fast)
            hot.steady = (discovery.root is not None and "trained" in discovery.params and hot.active
                          and not hot.paused_in(get_ident()) and hot.on_training is None)
            tokens, hot.pending_tokens = hot.pending_tokens, 0
            if hot.calls > self.max_calls:
                self.max_calls = hot.calls
            hot.calls = 0
            loss = self._loss.take()
            if loss is not None:
                self._loss.note(loss)
                self._steps.count(tokens, loss)  # the step rule (or, for one step, its timer)
            else:  # the loss read at backward, if any (several parts, or a first step)
                self._steps.count(tokens, None, self._loss.take_fast() if hot.fast_parts else None)
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}{fault_site(exc)}")

    def _on_other_step(self, optimizer: Any) -> None:
        """A secondary optimizer stepped: what was computed since the last step was its work. It is numbered at its
        first step (2, 3, ...: its ``train_loss.optimizer<N>`` and ``lr.optimizer<N>``)."""
        known = self._others.get(id(optimizer))
        if known is None or known[0]() is not optimizer:
            self._numbered += 1
            known = self._others[id(optimizer)] = (weakref.ref(optimizer), 1 + self._numbered)
        number = known[1]
        if self.on_other_step is not None:
            self.on_other_step(number, optimizer)
        self._hot.pending_tokens = self._hot.calls = 0
        loss = self._loss.take()
        if loss is None and self._hot.fast_parts:
            loss = self._loss.fast_loss()
        if loss is not None:
            self._losses.add(number)
            loss.series = f"{LOSS_SERIES}.optimizer{number}"
            self._steps.add_loss(loss)

    def stepper(self, source: str, model: Any) -> Stepper:
        """The run's stepper for ``source`` and ``model``, made (and ``model`` watched as a candidate) once."""
        key = (source, id(model) if model is not None else 0)
        found = self._steppers.get(key)
        if found is not None:
            return found
        found = self._steppers[key] = Stepper(source, trained_parameters(model))
        if model is not None:
            # as at a torch optimizer's construction (core/discovery.py): the model becomes a candidate
            self._discovery.note_optimizer(found, [model])
            if self._hot.primary is None:  # the first to step: no torch optimizer's root is dropped for it
                self._hot.primary = weakref.ref(found)
        return found


def stepper(monitor: Any, source: str, model: Any = None) -> Stepper:
    """The run's probes' stepper for ``source`` and ``model`` (made once); without probes a fresh one."""
    probes = monitor.probes
    return Stepper(source, trained_parameters(model)) if probes is None else probes.optimizers.stepper(source, model)


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
            model = probes.discovery.declared_model()
        found = probes.optimizers.stepper(source, model)
        if samples and not probes.hot.pending_tokens:  # the probes counted no batch this step
            probes.hot.pending_tokens = int(samples)
            monitor.set_token_unit("samples")
        probes.optimizers.on_step(found, (), {})  # counted as the step hook's general path counts a step
    except Exception as exc:
        monitor.warn_once("explicit-step", f"tm.step() disabled: {exc!r}")


def scaled_loss(monitor: Any, out: Any, scale: Any, loss: Any) -> None:
    """A framework multiplied ``loss`` by ``scale`` (a float or 0-d tensor) into ``out`` before backward: ``out``'s
    backward is divided by it, as a GradScaler's (docs/spec.md section 2, "Loss"). Never raises."""
    probes = getattr(monitor, "probes", None)
    if probes is None:
        return
    try:
        probes.loss.note_scaled(out, scale, loss)
    except Exception as exc:
        monitor.warn_once("scaled-loss", f"a framework's loss scale is not divided out: {exc!r}")


def backward_seen(monitor: Any) -> bool:
    """Whether a loss was passed to backward since the last counted step (or ever, with no step)."""
    with suppress(Exception):  # (no probes: monitor.probes is None)
        return bool(monitor.probes.loss.backward_seen())
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
