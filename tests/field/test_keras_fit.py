"""Keras 3 on the torch backend: ``Model.fit`` with validation and ModelCheckpoint, its optimizer not torch.optim."""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

ROWS, VALID, BATCH, EPOCHS = 48, 16, 8, 2
EVAL_SLEEP_S = 1.0  # per eval batch: 2 batches per eval, 2 evals (Keras' own eval work stays inside the 10%)
SAVE_SLEEP_S = 0.8  # inside each save (a layer's save_own_variables), one per epoch


@pytest.fixture
def keras(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")  # read at keras' import: set here, not globally
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    return keras


def _fit(keras, out_dir, sleeps: bool):
    import numpy as np

    keras.utils.set_random_seed(0)

    class Slow(keras.layers.Dense):  # sleeps while the checkpoint writes its weights
        def save_own_variables(self, store):
            if sleeps:
                time.sleep(SAVE_SLEEP_S)
            super().save_own_variables(store)

    class SlowEval(keras.callbacks.Callback):  # sleeps inside each validation batch
        def on_test_batch_end(self, batch, logs=None):
            if sleeps:
                time.sleep(EVAL_SLEEP_S)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), Slow(1)])
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.RandomState(0)
    x = rng.randn(ROWS + VALID, 4).astype("float32")
    y = x.sum(1, keepdims=True)
    save = keras.callbacks.ModelCheckpoint(os.path.join(out_dir, "e{epoch}.keras"))
    history = model.fit(x[:ROWS], y[:ROWS], batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False,
                        validation_data=(x[ROWS:], y[ROWS:]), callbacks=[SlowEval(), save])
    return model, history.history


@pytest.mark.slow
def test_keras_fit_counts_steps_samples_and_loss_and_times_eval_and_checkpoints(keras, tmp_path, printed):
    os.makedirs(tmp_path / "bare")
    os.makedirs(tmp_path / "ours")
    with printed() as bare:
        _, bare_history = _fit(keras, str(tmp_path / "bare"), sleeps=False)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model, history = _fit(keras, str(tmp_path / "ours"), sleeps=True)
    p = passport(m)
    steps_per_epoch = ROWS // BATCH
    assert history == bare_history  # bit-identical losses, with and without trainmeter
    assert m.steps == EPOCHS * steps_per_epoch == int(model.optimizer.iterations)  # not torch.optim: 0 before
    assert m.tokens == EPOCHS * ROWS and m.token_unit == "samples"
    assert p["frameworks"]["steps_source"].startswith("keras optimizer updates")
    assert p["frameworks"]["framework_steps"] == {"keras": m.steps}
    # Keras logs each epoch's mean loss: ours per step, averaged over the epoch, is the same number
    ours_loss = [v for _, v in logged(m, "train_loss")]
    assert len(ours_loss) == m.steps
    for epoch in range(EPOCHS):
        mean = sum(ours_loss[epoch * steps_per_epoch:(epoch + 1) * steps_per_epoch]) / steps_per_epoch
        assert mean == pytest.approx(history["loss"][epoch], rel=1e-5)
    # its epoch logs are series at the epoch's last step: the validation loss Keras computed
    assert logged(m, "val_loss") == [(steps_per_epoch * (e + 1), v) for e, v in enumerate(history["val_loss"])]
    assert p["series_info"]["val_loss"]["source"] == "logged by keras at each epoch's end"
    assert within(p["phases_s"]["eval"], EPOCHS * (VALID // BATCH) * EVAL_SLEEP_S), p["phases_s"]
    assert within(p["phases_s"]["checkpoint"], EPOCHS * SAVE_SLEEP_S), p["phases_s"]
    assert [(c["step"], c["source"]) for c in p["checkpoints"]] == [
        (steps_per_epoch * (e + 1), "keras Model.save") for e in range(EPOCHS)]
    assert all(c["bytes"] > 0 for c in p["checkpoints"]) and p["time"]["checkpoint_saves"] == EPOCHS
    assert p.get("steps_unknown") is None and p["goodput"] is not None
    # the rate its optimizer applied, read at each counted update (no "no optimizer step was seen")
    assert [v for _, v in logged(m, "lr")] == pytest.approx([float(model.optimizer.learning_rate)] * m.steps)
    assert p["optim"]["lr"]["missing"] is None and p["optim"]["lr"]["optimizers"] == {"lr": "keras's optimizer"}
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def _fit_per_execution(keras, per_execution: int):
    """``fit`` with several batches per ``train_function`` call, as Keras' torch trainer runs ``steps_per_execution``
    where it allows it (a loop over the execution's batches); the step and loss of each batch are Keras' own."""
    import numpy as np

    keras.utils.set_random_seed(0)

    class PerExecution(keras.Sequential):
        def make_train_function(self, force=False):
            if self.train_function is not None and not force:
                return self.train_function
            train_step = self.train_step

            def train_function(data):
                logs = {}
                for step_data in data:
                    logs = train_step(step_data)
                return logs

            self.train_function = train_function

    model = PerExecution([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", steps_per_execution=per_execution)
    x = np.random.RandomState(0).randn(ROWS + BATCH // 2, 4).astype("float32")  # a short last batch
    history = model.fit(x, x.sum(1, keepdims=True), batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    return model, history.history


def test_keras_several_steps_per_execution_counts_each_optimizer_update(keras, tmp_path, printed):
    with printed() as bare:
        bare_model, bare_history = _fit_per_execution(keras, 3)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model, history = _fit_per_execution(keras, 3)
    p = passport(m)
    batches = ROWS // BATCH + 1
    assert history == bare_history  # bit-identical
    assert m.steps == EPOCHS * batches == int(model.optimizer.iterations) == int(bare_model.optimizer.iterations)
    assert m.tokens == EPOCHS * (ROWS + BATCH // 2) and m.token_unit == "samples"
    ours_loss = [v for _, v in logged(m, "train_loss")]  # one loss per update, their epoch mean = Keras' logged one
    assert len(ours_loss) == m.steps and p["series_info"]["train_loss"].get("ambiguous") is not True
    for epoch in range(EPOCHS):
        rows = [BATCH] * (batches - 1) + [BATCH // 2]  # Keras weights each batch's loss by its rows
        part = ours_loss[epoch * batches:(epoch + 1) * batches]
        mean = sum(v * r for v, r in zip(part, rows, strict=True)) / sum(rows)
        assert mean == pytest.approx(history["loss"][epoch], rel=1e-5)
    assert p["frameworks"]["framework_steps"] == {"keras": m.steps}
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_keras_train_on_batch_counts_one_step_per_call(keras, tmp_path):
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.RandomState(0).randn(BATCH, 4).astype("float32")
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        losses = [float(model.train_on_batch(x, x.sum(1, keepdims=True))) for _ in range(3)]
    assert m.steps == 3 == int(model.optimizer.iterations) and m.tokens == 3 * BATCH
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(losses, rel=1e-6)
    assert [v for _, v in logged(m, "lr")] == pytest.approx([0.01] * 3)  # SGD's default, read where steps count
    assert passport(m)["optim"]["lr"]["missing"] is None and m.warnings == []


def test_keras_with_a_learning_rate_schedule_says_why_its_rate_is_not_read(keras, tmp_path):
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5)),
                  loss="mse")
    x = np.random.RandomState(0).randn(BATCH, 4).astype("float32")
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model.fit(x, x.sum(1, keepdims=True), batch_size=BATCH, epochs=2, verbose=0)
    assert m.steps == 2 and logged(m, "lr") == [] and m.warnings == []
    optim = passport(m)["optim"]
    assert optim["lr"]["missing"] == "the steps are counted from keras's updates and its optimizer's rate is not read"
    assert "clip_grad_norm_" in optim["grad_norm"]["missing"]  # its own reason, not the rate's


@pytest.mark.parametrize("scaled", ["loss_scale_optimizer", "loss_scale_factor"])
def test_keras_loss_scaling_is_divided_out_of_the_recorded_loss(keras, tmp_path, scaled):
    import numpy as np

    keras.utils.set_random_seed(0)
    if scaled == "loss_scale_optimizer":  # what mixed_float16 wraps the optimizer in: a dynamic scale
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=2.0 ** 12)
    else:
        optimizer = keras.optimizers.SGD(0.01, loss_scale_factor=128.0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.RandomState(0).randn(ROWS, 4).astype("float32")
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        history = model.fit(x, x.sum(1, keepdims=True), batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    ours = [v for _, v in logged(m, "train_loss")]
    assert m.steps == ROWS // BATCH == int(model.optimizer.iterations) == len(ours)
    assert sum(ours) / len(ours) == pytest.approx(history.history["loss"][0], rel=1e-5)  # never x the scale
