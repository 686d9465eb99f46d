"""PyTorch Ignite: ``create_supervised_trainer``, an evaluator run every few iterations, ``ModelCheckpoint``."""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ignite")

import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import Sleeper, logged, passport, printed_by_us, within  # noqa: E402

STEPS, BATCH, EVERY, VALID = 6, 4, 3, 8
EVAL_SLEEP_S = 0.3  # per evaluator iteration: 2 per evaluation
SAVE_SLEEP_S = 0.5  # pickled inside each ModelCheckpoint save (a temp file, then renamed)


class Slow:
    """Saved beside the model by ModelCheckpoint: its state sleeps while the checkpoint is pickled."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def state_dict(self):
        return {"slow": Sleeper(self.seconds)}


def _engines(out_dir, sleeps: bool, stop=None):
    from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
    from ignite.handlers import ModelCheckpoint
    from ignite.metrics import Loss

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    rows: list[int] = []
    model.register_forward_pre_hook(lambda mod, args: rows.append(len(args[0])) if torch.is_grad_enabled() else None)
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), F.mse_loss)
    evaluator = create_supervised_evaluator(model, metrics={"val_mse": Loss(F.mse_loss)})
    x = torch.randn(STEPS * BATCH + VALID, 4, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    train = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(STEPS * BATCH)), batch_size=BATCH)
    valid = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(STEPS * BATCH, len(data))),
                                        batch_size=BATCH)
    seen = {"losses": [], "val_mse": [], "saved": [], "rows": rows}
    checkpoint = ModelCheckpoint(str(out_dir), "m", n_saved=None, require_empty=False,
                                 global_step_transform=lambda engine, event: trainer.state.iteration)
    evaluator.add_event_handler(Events.ITERATION_COMPLETED, lambda e: time.sleep(EVAL_SLEEP_S if sleeps else 0.0))
    evaluator.add_event_handler(Events.COMPLETED, checkpoint, {"model": model, "slow": Slow(SAVE_SLEEP_S * sleeps)})
    evaluator.add_event_handler(Events.COMPLETED, lambda e: seen["saved"].append(checkpoint.last_checkpoint))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen["losses"].append(e.state.output))

    @trainer.on(Events.ITERATION_COMPLETED(every=EVERY))
    def validate(engine):
        seen["val_mse"].append(evaluator.run(valid).metrics["val_mse"])

    if stop is not None:  # asked as the step's iteration completes: the trainer terminates after it
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), stop)
    return trainer, train, seen


def test_ignite_engine_counts_steps_samples_loss_and_times_its_evaluator_and_model_checkpoint(tmp_path, printed):
    with printed() as bare:
        bare_trainer, bare_train, bare_seen = _engines(tmp_path / "bare", sleeps=False)
        bare_trainer.run(bare_train, max_epochs=1)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer, train, seen = _engines(tmp_path / "ours", sleeps=True)  # the whole cell monitored
        trainer.run(train, max_epochs=1)
    p = passport(m)
    assert seen["losses"] == bare_seen["losses"]  # bit-identical, with and without trainmeter
    assert m.steps == STEPS == trainer.state.iteration
    assert m.tokens == sum(seen["rows"]) == STEPS * BATCH and m.token_unit == "samples"
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(seen["losses"], rel=1e-6)
    assert [v for _, v in logged(m, "val_mse")] == pytest.approx(seen["val_mse"])  # the evaluator's metrics
    # the evaluator's run is eval (its model.eval() inside is no inference span); the save at its end is checkpoint
    evaluations = STEPS // EVERY
    assert within(p["phases_s"]["eval"], evaluations * (VALID // BATCH) * EVAL_SLEEP_S), p["phases_s"]
    assert p["time"]["eval_spans"] == evaluations and p["phases_s"].get("inference", 0) == 0
    assert within(p["phases_s"]["checkpoint"], evaluations * SAVE_SLEEP_S), p["phases_s"]
    # one record per save: the final file (not the temp file it was written to), its size
    assert [(c["path"], c["step"], c["source"]) for c in p["checkpoints"]] == [
        (str(path), EVERY * (i + 1), "ignite Checkpoint") for i, path in enumerate(seen["saved"])]
    assert [c["bytes"] for c in p["checkpoints"]] == [os.path.getsize(path) for path in seen["saved"]]
    assert [os.path.basename(path) for path in seen["saved"]] == ["m_checkpoint_3.pt", "m_checkpoint_6.pt"]
    assert p["time"]["checkpoint_saves"] == evaluations and p["frameworks"]["fits"] == {"ignite": 1}
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_ignite_trainer_stops_through_terminate_after_the_step_asked(tmp_path):
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer, train, _ = _engines(tmp_path / "ours", sleeps=False,
                                     stop=lambda e: m.extension("frameworks").control.request_stop())
        trainer.run(train, max_epochs=1)
    assert m.steps == 2 == trainer.state.iteration
    assert m.extension("frameworks").control is None  # the run is over
