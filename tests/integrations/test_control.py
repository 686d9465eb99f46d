"""Each framework's control stops its own loop at the next step boundary and saves through its own saver.

The real frameworks train tiny models (built in code, nothing downloaded); the stop is asked
for from inside the framework's own loop, as the controls wing does at a step boundary
(docs/spec.md section 11).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from trainmeter.integrations.view import FrameworkControl  # noqa: E402

STOP_AT = 2


def _control(m):
    view = m.extension("frameworks")
    assert view is not None and isinstance(view.control, FrameworkControl)
    return view.control


def test_keras_stops_through_stop_training_and_saves_a_keras_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    saved: list[str | None] = []

    class AtStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == STOP_AT:
                control = _control(m)
                assert control.name == "keras" and control.request_stop() is True
                saved.append(control.save_checkpoint(str(tmp_path), "step-1"))

    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.fit(x, x[:, :1], batch_size=8, epochs=3, verbose=0, callbacks=[AtStep()])
    assert m.steps == STOP_AT == int(model.optimizer.iterations)
    assert saved == [str(tmp_path / "step-1.keras")] and Path(saved[0]).stat().st_size > 0
    assert m.extension("frameworks").control is None  # the fit is over


def test_fastai_stops_by_cancel_fit_at_the_batch_end_and_saves_through_learn_save(tmp_path):
    pytest.importorskip("fastai")
    from fastai.basics import Callback

    learn = _fastai_learner()
    saved: list[str | None] = []

    class AtStep(Callback):
        def after_step(self):
            if self.learn.train_iter + 1 == STOP_AT:
                control = _control(m)
                assert control.name == "fastai" and control.request_stop() is True
                saved.append(control.save_checkpoint(str(tmp_path), "step-1"))

    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        with learn.no_logging():
            learn.fit(3, 1e-2, cbs=AtStep())
    assert m.steps == STOP_AT == learn.train_iter
    assert saved == [str(tmp_path / "step-1.pth")] and Path(saved[0]).exists()


def _fastai_learner():
    from fastai.basics import DataLoaders, Learner, MSELossFlat, set_seed

    set_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    rows = list(zip(x, x.sum(1, keepdim=True), strict=True))
    dls = DataLoaders.from_dsets(rows[:48], rows[48:], bs=8, shuffle=False, num_workers=0)
    return Learner(dls, torch.nn.Linear(4, 1), loss_func=MSELossFlat())


def _hf_trainer(tmp_path, callback):
    """A one-layer GPT-2 (built from a config, nothing downloaded) in a Trainer of 8 steps with ``callback``."""
    transformers = pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=8, n_layer=1, n_head=2))
    ids = torch.randint(0, 32, (32, 8), generator=torch.Generator().manual_seed(0))
    rows = [{"input_ids": r, "labels": r} for r in ids]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=8, per_device_train_batch_size=4,
                             report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no",
                             logging_strategy="no")
    return Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])


def test_hf_trainer_stops_through_should_training_stop_and_saves_through_save_model(tmp_path):
    pytest.importorskip("transformers")
    from transformers import TrainerCallback

    saved: list[str | None] = []

    class AtStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == STOP_AT:
                ours = _control(m)
                assert ours.name == "hf" and ours.request_stop() is True
                saved.append(ours.save_checkpoint(str(tmp_path), "step-1"))

    trainer = _hf_trainer(tmp_path, AtStep())
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    assert m.steps == STOP_AT == trainer.state.global_step
    assert saved == [str(tmp_path / "step-1")]
    assert (tmp_path / "step-1" / "config.json").exists()
    assert not any("Trainmeter" in type(c).__name__ for c in trainer.callback_handler.callbacks)


def test_lightning_stops_through_should_stop_and_saves_through_save_checkpoint(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    saved: list[str | None] = []

    class AtStep(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == STOP_AT:
                ours = _control(m)
                assert ours.name == "lightning" and ours.request_stop() is True
                saved.append(ours.save_checkpoint(str(tmp_path), "step-1"))

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=8)
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[AtStep()],
                         default_root_dir=str(tmp_path))
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.fit(Tiny(), data)
    assert m.steps == STOP_AT == trainer.global_step
    assert saved == [str(tmp_path / "step-1.ckpt")] and Path(saved[0]).exists()


def test_accelerate_cannot_stop_a_users_loop_and_saves_through_save_state(tmp_path):
    accelerate = pytest.importorskip("accelerate")

    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        accelerator = accelerate.Accelerator(cpu=True)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        control = _control(m)
        assert control.name == "accelerate" and control.request_stop() is False
        written = control.save_checkpoint(str(tmp_path), "step-1")
    assert written == str(tmp_path / "step-1") and any(Path(written).iterdir())


def test_a_control_whose_framework_object_is_gone_says_so():
    class Model:
        pass

    model = Model()
    control = FrameworkControl(model, "keras", stop_flag="stop_training")
    del model
    with pytest.raises(RuntimeError, match="keras object this control drove is gone"):
        control.request_stop()


def test_keras_train_on_batch_is_one_step_with_its_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    import numpy as np

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.RandomState(0).randn(8, 4).astype("float32")
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        losses = [model.train_on_batch(x, x[:, :1]) for _ in range(3)]
    assert m.steps == 3 == int(model.optimizer.iterations) and m.tokens == 24 and m.token_unit == "samples"
    assert len(losses) == 3 and m.warnings == []


def test_tm_stop_and_checkpoint_in_an_hf_trainer_go_through_the_trainers_own_stop_and_saver(tmp_path):
    pytest.importorskip("transformers")
    from transformers import TrainerCallback

    ended: list[int] = []

    class AtStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == STOP_AT:
                assert tm.checkpoint() and tm.stop()  # as the widget's buttons do, from Python

        def on_train_end(self, args, state, control, **kwargs):
            ended.append(state.global_step)  # the framework's own end ran

    trainer = _hf_trainer(tmp_path, AtStep())
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    assert m.status == "stopped" and ended == [trainer.state.global_step]
    assert STOP_AT <= trainer.state.global_step <= STOP_AT + 1 < 8  # at the next step boundary, never later
    checkpoints = m.controls.passport_fields()["checkpoints"]
    assert len(checkpoints) == 1 and checkpoints[0]["source"] == "hf"
    assert (Path(m.run_dir) / checkpoints[0]["path"] / "config.json").exists()  # HF's own saver wrote it
