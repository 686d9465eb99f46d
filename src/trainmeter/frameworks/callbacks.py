"""The callbacks the adapters put into a framework's own callback list (classes made at the framework's first fit).

Each subclasses the framework's callback base (imported only once that framework is running) and
calls back into the wing: a step the framework made (Keras 3 and fastai optimizers are not
``torch.optim``, so no torch hook sees them), a stop asked for through the control (docs/spec.md
section 11). Training thread: frameworks call their callbacks on the thread that fits.
"""

from __future__ import annotations

from typing import Any, Protocol


class StepListener(Protocol):
    """What a callback calls on the wing."""

    def framework_step(self, framework: str, model: Any) -> None: ...

    def framework_fit(self, framework: str, target: Any) -> bool: ...

    def framework_logs(self, framework: str, logs: Any) -> None: ...

    def stop_requested(self, framework: str) -> bool: ...


_CLASSES: dict[str, type] = {}


def keras_callback(listener: StepListener) -> Any:
    """A ``keras.callbacks.Callback``: each training batch's end is one optimizer step of ``model``."""
    cls = _CLASSES.get("keras")
    if cls is None:
        import keras

        class TrainmeterKerasCallback(keras.callbacks.Callback):
            """trainmeter's step source in ``Model.fit`` (removed with the fit)."""

            def __init__(self, listener: StepListener) -> None:
                super().__init__()
                self._listener = listener

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                self._listener.framework_step("keras", self.model)

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                self._listener.framework_logs("keras", logs)

        cls = _CLASSES["keras"] = TrainmeterKerasCallback
    return cls(listener)


def fastai_callback(listener: StepListener) -> Any:
    """A fastai ``Callback``: ``after_step`` counts a step (unless a torch optimizer does), ``after_batch`` stops."""
    cls = _CLASSES.get("fastai")
    if cls is None:
        from fastai.callback.core import Callback, CancelFitException

        class TrainmeterFastaiCallback(Callback):
            """trainmeter's step source and stop in ``Learner.fit`` (removed with the fit)."""

            order = 100  # after the learner's own callbacks (Recorder is 50)
            run_valid = False

            def __init__(self, listener: StepListener) -> None:
                self._listener = listener
                self._counts_steps = False

            def before_fit(self) -> None:  # the learner's optimizer exists now
                self._counts_steps = self._listener.framework_fit("fastai", self.learn)

            def after_step(self) -> None:
                if self._counts_steps:
                    self._listener.framework_step("fastai", self.learn.model)

            def after_batch(self) -> None:
                if self._listener.stop_requested("fastai"):
                    raise CancelFitException()

            def after_epoch(self) -> None:  # the Recorder (order 50) has written the epoch's row
                recorder = getattr(self.learn, "recorder", None)
                names, row = getattr(recorder, "metric_names", None), getattr(recorder, "log", None)
                if names is not None and row is not None:
                    self._listener.framework_logs("fastai", dict(zip(list(names), list(row))))

        cls = _CLASSES["fastai"] = TrainmeterFastaiCallback
    return cls(listener)


def hf_callback(listener: StepListener) -> Any:
    """A ``transformers.TrainerCallback``: a stop asked for sets ``control.should_training_stop`` at the step end."""
    cls = _CLASSES.get("hf")
    if cls is None:
        from transformers import TrainerCallback

        class TrainmeterTrainerCallback(TrainerCallback):
            """trainmeter's stop in ``Trainer.train`` (removed with the train call)."""

            def __init__(self, listener: StepListener) -> None:
                self._listener = listener

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                if self._listener.stop_requested("hf"):
                    control.should_training_stop = True
                return control

        cls = _CLASSES["hf"] = TrainmeterTrainerCallback
    return cls(listener)
