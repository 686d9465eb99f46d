"""The Keras 3 adapter (torch backend): ``fit``, ``train_on_batch`` and its optimizers' ``apply``/``scale_loss``
(docs/spec.md section 11: a step is each update the fitted model's optimizer applies). Training thread.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from trainmeter.core import explicit_steps
from trainmeter.integrations.adapter import Adapter, Args, Kwargs, Site


def rows(x: Any) -> int | None:
    """Rows of a batch given as an array (``train_on_batch(x, y)``), or ``None``."""
    with contextlib.suppress(Exception):  # no shape, a 0-d one, or not a number
        return int(x.shape[0])
    return None


def loss_scale(optimizer: Any) -> Any:
    """The factor a Keras optimizer's ``scale_loss`` multiplied the loss by, as its own code reads it: a
    ``LossScaleOptimizer``'s dynamic scale (its variable's tensor once built, else ``initial_scale``), else
    ``loss_scale_factor``; ``None`` when it does not scale. Never raises."""
    with contextlib.suppress(Exception):
        if hasattr(optimizer, "dynamic_scale") or hasattr(optimizer, "inner_optimizer"):
            if getattr(optimizer, "built", False):
                variable = optimizer.dynamic_scale
                return getattr(variable, "value", variable)
            return float(optimizer.initial_scale)
        factor = getattr(optimizer, "loss_scale_factor", None)
        return None if factor is None else float(factor)
    return None


def learning_rate(optimizer: Any) -> Any:
    """The rate a Keras optimizer (or a loss-scale wrapper's inner one) applies: its rate variable's 0-d tensor, read
    as it is (no device work); ``None`` for a ``LearningRateSchedule`` (computing it would be device work) or no
    rate. Never raises."""
    with contextlib.suppress(Exception):
        value = getattr(getattr(getattr(optimizer, "inner_optimizer", optimizer), "_learning_rate", None), "value", None)
        return value if getattr(value, "ndim", None) == 0 else None
    return None


@functools.cache
def _callback_class() -> type:
    import keras

    class TrainmeterKerasCallback(keras.callbacks.Callback):
        """trainmeter's step source in ``Model.fit`` (removed with the fit): each training batch's end is a step of its
        model (unless its optimizer's updates were counted), each epoch's ``logs`` series."""

        def __init__(self, adapter: KerasAdapter) -> None:
            super().__init__()
            self._adapter = adapter

        def on_train_begin(self, logs: Any = None) -> None:
            self._adapter.began(self.params)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._adapter.step(self.model)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._adapter.wing.framework_logs("keras", logs)

    return TrainmeterKerasCallback


_OPT = "keras.src.optimizers"


class KerasAdapter(Adapter):
    """Keras' fit and ``train_on_batch``, and its optimizers' updates and loss scaling (the sites below)."""

    framework = "keras"
    control = {"stop_flag": "stop_training", "saver": "save", "suffix": ".keras"}  # read after each batch
    joins_iterables = False
    steps_at = "optimizer.iterations"
    callback_class = staticmethod(_callback_class)
    sites = (
        Site(module="keras.src.backend.torch.trainer", owner="TorchTrainer", attr="fit", callbacks_at=5,
             callbacks_name="callbacks"),
        Site(module="keras.src.backend.torch.trainer", owner="TorchTrainer", attr="train_on_batch"),
        Site(module="keras.src.backend.torch.trainer", owner="TorchTrainer", attr="evaluate", fit=False, phase="eval"),
        Site(module=f"{_OPT}.base_optimizer", owner="BaseOptimizer", attr="apply"),
        Site(module=f"{_OPT}.base_optimizer", owner="BaseOptimizer", attr="scale_loss"),
        Site(module=f"{_OPT}.loss_scale_optimizer", owner="LossScaleOptimizer", attr="scale_loss"),
    )

    def __init__(self, wing: Any) -> None:
        super().__init__(wing)
        self.held: Any = None  # (model, rows of a train_on_batch batch) while a Keras fit or batch runs
        self._applied = 0  # updates of that model's optimizer counted since its last batch end
        self._initial_epoch: Any = 0  # the fit's initial_epoch

    def begin(self, site: Site, target: Any, args: Args, kwargs: Kwargs) -> tuple[Args, Kwargs, Any]:
        self.held, self._applied = (target, None), 0
        self._initial_epoch = args[11] if len(args) > 11 else kwargs.get("initial_epoch", 0)
        explicit_steps.stepper(self.wing.monitor, "keras", target)  # the model watched from its first batch
        return super().begin(site, target, args, kwargs)

    def end(self, target: Any, extra: Any) -> None:
        self.held = None

    def began(self, params: Any) -> None:
        """``on_train_begin`` of a ``fit(initial_epoch=n)``: the step resumed from is ``n`` epochs of its batches per
        epoch (``params["steps"]``; unknown: not read). Declared: Keras keeps no step count of the epochs skipped."""
        epoch = self._initial_epoch
        if not epoch:
            return
        with self.wing.guard("keras", "resume not read"):
            per = params.get("steps")
            self.wing.resumed("keras", epoch * per if per else None, None, "declared", f"Keras fit(initial_epoch="
                              f"{epoch}) × its {per} batches per epoch" if per else f"Keras fit(initial_epoch={epoch}): "
                              "its batches per epoch unknown (a dataset of unknown length)")

    def step(self, model: Any, samples: int | None = None, update: bool = False) -> None:
        """An update of its optimizer is a step; a batch end is one only when no update was seen since the last."""
        wing = self.wing
        if not wing.gate.here():  # open: the run started
            return
        if update:
            self._applied += 1
        else:
            applied, self._applied = self._applied, 0
            if applied:
                return  # the updates since the last batch end were its steps
        explicit_steps.hold_rate(wing.monitor, "keras", model, learning_rate(getattr(model, "optimizer", None)))
        wing.framework_step("keras", model, samples)

    def on_train_on_batch(self, original: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        """One optimizer step of Keras' own, outside fit."""
        wing = self.wing
        if wing.depth or not wing.gate.here():
            return original(target, *args, **kwargs)
        explicit_steps.stepper(wing.monitor, "keras", target)  # its batch counted from the first call
        batch = rows(args[0] if args else kwargs.get("x"))
        self.held, held = (target, batch), self.held
        try:
            result = original(target, *args, **kwargs)
        finally:
            self.held = held
        self.step(target, batch)
        return result

    def on_apply(self, original: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """One update of the fitted model's optimizer (or of its loss-scale wrapper's inner one): a step."""
        held = self.held
        result = original(optimizer, *args, **kwargs)
        if held is None or not self.wing.gate.here():
            return result
        with self.wing.guard("keras", "adapter's step count disabled"):
            own = getattr(held[0], "optimizer", None)
            if optimizer is own or optimizer is getattr(own, "inner_optimizer", None):
                self.step(held[0], held[1], update=True)
        return result

    def on_scale_loss(self, original: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """The fitted model's optimizer scaled the loss before backward: the scale is divided out at backward."""
        out = original(optimizer, *args, **kwargs)
        monitor, held, loss = self.wing.monitor, self.held, args[0] if args else kwargs.get("loss")
        if held is None or out is loss or not self.wing.gate.here():
            return out
        with self.wing.guard("keras", "adapter's loss scale disabled"):
            scale = loss_scale(optimizer) if optimizer is getattr(held[0], "optimizer", None) else None
            if scale is not None:
                explicit_steps.scaled_loss(monitor, out, scale, loss)
        return out
