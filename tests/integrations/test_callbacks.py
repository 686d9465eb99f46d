"""The callbacks put into a framework's list call back into the wing: a step, a stop, logs, and nothing else."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainmeter.core.patches import Gate
from trainmeter.integrations import frameworks as fastai
from trainmeter.integrations import hf, keras


class Wing:
    """What an adapter calls on the wing."""

    def __init__(self, stop: bool = False, monitor: object = None) -> None:
        self.steps: list[tuple[str, object]] = []
        self.logs: list[tuple[str, dict]] = []
        self.stop = stop
        self.monitor = monitor
        self.gate = Gate()
        self.gate.open()
        self.taps = SimpleNamespace(on=True, record=lambda library, values: self.logs.append((library, values)))

    def framework_step(self, framework, model, samples=None):
        self.steps.append((framework, model))

    def framework_logs(self, framework, logs):
        self.logs.append((framework, dict(logs)))

    def stop_requested(self, framework):
        return self.stop


def test_the_keras_callback_counts_each_training_batch_end_as_a_step_of_its_model(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    pytest.importorskip("keras")
    wing = Wing(monitor=object())
    adapter = keras.KerasAdapter(wing)
    cb = adapter.callback_class()(adapter)
    model = object()
    cb.set_model(model)
    cb.on_train_batch_end(0)
    cb.on_test_batch_end(0)  # a validation batch is no step
    cb.on_epoch_end(0, {"loss": 0.5})
    assert wing.steps == [("keras", model)] and wing.logs == [("keras", {"loss": 0.5})]


def test_the_fastai_callback_steps_only_when_its_optimizer_is_not_torchs_and_stops_by_cancel_fit():
    pytest.importorskip("fastai")
    import torch
    from fastai.callback.core import CancelFitException

    class Learn:
        model = "the model"
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    wing = Wing(stop=True)
    adapter = fastai.FastaiAdapter(wing)
    cb = adapter.callback_class()(adapter)
    cb.learn = Learn()
    cb.before_fit()
    cb.after_step()
    assert wing.steps == []  # a torch optimizer: the torch hook counts it
    with pytest.raises(CancelFitException):
        cb.after_batch()
    Learn.opt, wing.stop = None, False  # fastai's own optimizer
    cb.before_fit()
    cb.after_step()
    cb.after_batch()
    assert wing.steps == [("fastai", "the model")]


def test_the_hf_callbacks_set_should_training_stop_only_when_asked_and_read_the_logs_as_the_trainer_got_them():
    pytest.importorskip("transformers")
    from transformers import TrainerControl

    wing = Wing(stop=False)
    adapter = hf.HfAdapter(wing)
    first, last = hf.callback_class()(adapter, False), hf.callback_class()(adapter, True)
    control = TrainerControl()
    first.on_step_end(None, None, control)
    last.on_step_end(None, None, control)
    assert control.should_training_stop is False
    wing.stop = True
    first.on_step_end(None, None, control)
    assert control.should_training_stop is False  # the last one of the list carries the stop
    last.on_step_end(None, None, control)
    assert control.should_training_stop is True
    args = SimpleNamespace(include_num_input_tokens_seen="no")
    first.on_log(args, None, control, logs={"loss": 0.5, "grad_norm": 1.0, "epoch": 0.25, "note": "x"})
    assert wing.logs == [("transformers", {"loss": 0.5, "grad_norm": 1.0})] and wing.gate.depth == 1
    last.on_log(args, None, control, logs={})
    assert wing.gate.depth == 0  # the other taps record again


def test_the_logs_as_passed_leave_out_what_trainer_log_adds():
    assert hf.as_passed(SimpleNamespace(include_num_input_tokens_seen="no"), {"loss": 1.0, "epoch": 2.0}) == {
        "loss": 1.0}
    tokens = SimpleNamespace(include_num_input_tokens_seen="all")
    step = {"loss": 1.0, "epoch": 2.0, "num_input_tokens_seen": 64, "train_runtime": 3.0,
            "train_tokens_per_second": 21.3}
    assert hf.as_passed(tokens, step) == {"loss": 1.0}
    end = {"train_runtime": 9.0, "train_loss": 1.5, "num_input_tokens_seen": 64}
    assert hf.as_passed(tokens, end) == {"train_runtime": 9.0, "train_loss": 1.5}
