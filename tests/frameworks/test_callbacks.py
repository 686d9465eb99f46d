"""The callbacks put into a framework's list call back into the wing: a step, a stop, and nothing else."""

from __future__ import annotations

import pytest

from trainmeter.frameworks import callbacks


class Listener:
    def __init__(self, stop: bool = False, counts: bool = True) -> None:
        self.steps: list[tuple[str, object]] = []
        self.stop = stop
        self.counts = counts

    def framework_step(self, framework, model):
        self.steps.append((framework, model))

    def framework_fit(self, framework, target):
        return self.counts

    def stop_requested(self, framework):
        return self.stop


def test_the_keras_callback_counts_each_training_batch_end_as_a_step_of_its_model(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    pytest.importorskip("keras")
    listener = Listener()
    cb = callbacks.keras_callback(listener)
    model = object()
    cb.set_model(model)
    cb.on_train_batch_end(0)
    cb.on_test_batch_end(0)  # a validation batch is no step
    assert listener.steps == [("keras", model)]


def test_the_fastai_callback_steps_only_when_its_optimizer_is_not_torchs_and_stops_by_cancel_fit():
    pytest.importorskip("fastai")
    from fastai.callback.core import CancelFitException

    class Learn:
        model = "the model"

    listener = Listener(stop=True, counts=False)
    cb = callbacks.fastai_callback(listener)
    cb.learn = Learn()
    cb.before_fit()
    cb.after_step()
    assert listener.steps == []  # a torch optimizer: the torch hook counts it
    with pytest.raises(CancelFitException):
        cb.after_batch()
    listener.counts, listener.stop = True, False
    cb.before_fit()
    cb.after_step()
    cb.after_batch()
    assert listener.steps == [("fastai", "the model")]


def test_the_hf_callback_sets_should_training_stop_only_when_asked():
    pytest.importorskip("transformers")
    from transformers import TrainerControl

    control = TrainerControl()
    callbacks.hf_callback(Listener(stop=False)).on_step_end(None, None, control)
    assert control.should_training_stop is False
    callbacks.hf_callback(Listener(stop=True)).on_step_end(None, None, control)
    assert control.should_training_stop is True
