"""The frameworks' own resume without a step of their own to read (docs/spec.md section 22): accelerate's
``load_state(dir)`` (the folder matched to the parent's checkpoint record) and Keras' ``fit(initial_epoch=n)`` (``n``
epochs of its batches, declared)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402


def _passport(m) -> dict:
    return json.loads((m.run_dir / "passport.json").read_text())


def _accelerate_loop(steps: range, save=None, load=None) -> None:
    """Optimizer steps ``steps``, ``save_state("state")`` after step ``save``, ``load_state(load)`` first."""
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 1)
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    if load is not None:
        accelerator.load_state(str(load))
    for step in steps:
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(step))
        accelerator.backward(model(x).pow(2).mean())
        opt.step()
        opt.zero_grad()
        if step == save:
            accelerator.save_state("state")


def test_accelerate_load_state_of_a_folder_the_parent_saved_is_the_step_resumed_from(run_root, tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    monkeypatch.chdir(tmp_path)
    with tm.monitor(name="acc-first", run_dir=run_root):
        _accelerate_loop(range(1, 11), save=6)
    with tm.monitor(name="acc-second", run_dir=run_root, resume="acc-first") as m:
        _accelerate_loop(range(7, 13), load=tmp_path / "state")
    lineage = _passport(m)["lineage"]
    resumed = lineage["resumed_from"]
    assert (resumed["step"], resumed["provenance"], resumed["framework"], resumed["framework_step"]) == (
        6, "detected", "accelerate", None)
    assert resumed["source"].startswith("accelerate load_state(input_dir); its path is the parent's checkpoint")
    assert lineage["lost_work"]["steps"] == 4 and lineage["training"]["steps"] == 12


def test_keras_initial_epoch_is_the_step_resumed_from_as_epochs_of_its_batches_declared(run_root, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)).numpy()

    def fit(**kwargs) -> None:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, x[:, :1], batch_size=4, verbose=0, **kwargs)

    with tm.monitor(name="keras-first", run_dir=run_root):
        fit(epochs=3)  # 12 steps, no checkpoint
    with tm.monitor(name="keras-second", run_dir=run_root, resume="keras-first") as m:
        fit(epochs=4, initial_epoch=2)
    lineage = _passport(m)["lineage"]
    resumed = lineage["resumed_from"]
    assert (resumed["step"], resumed["provenance"], resumed["framework"], resumed["framework_step"]) == (
        8, "declared", "keras", 8)
    assert "initial_epoch=2) × its 4 batches per epoch" in resumed["source"]
    assert "keras's step is the training's step" in resumed["source"]
    assert lineage["lost_work"]["steps"] == 4 and lineage["training"]["steps"] == 8 + 8
