"""Lightning Trainer: validation, ModelCheckpoint on validation end, accumulation 2."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lightning")

import lightning as L  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import Sleeper, logged, passport, printed_by_us, within  # noqa: E402

STEPS, BATCH, ACCUM = 6, 4, 2
VAL_SLEEP_S = 0.5  # per validation batch
SAVE_SLEEP_S = 1.0  # per checkpoint


class Regressor(L.LightningModule):
    def __init__(self, sleeps: bool) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.sleeps = sleeps
        self.micro_losses: list[float] = []
        self.val_slept = 0.0
        self.save_slept = 0.0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.micro_losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        if self.sleeps:
            time.sleep(VAL_SLEEP_S)
            self.val_slept += VAL_SLEEP_S
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def on_save_checkpoint(self, checkpoint):
        if self.sleeps:  # pickled by torch.save: sleeps while the checkpoint is written
            checkpoint["delay"] = Sleeper(SAVE_SLEEP_S)
            self.save_slept += SAVE_SLEEP_S

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=BATCH)


def _fit(root, sleeps: bool):
    from lightning.pytorch.callbacks import ModelCheckpoint

    L.seed_everything(0, verbose=False)
    module = Regressor(sleeps)
    trainer = L.Trainer(
        max_steps=STEPS, accumulate_grad_batches=ACCUM, val_check_interval=6, limit_val_batches=2,
        num_sanity_val_steps=0, log_every_n_steps=1, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
        callbacks=[ModelCheckpoint(dirpath=str(root / "ckpt"), monitor="val_loss", save_top_k=-1)])
    return module, trainer


@pytest.mark.slow
def test_lightning_steps_samples_loss_validation_checkpoint_and_nothing_printed(tmp_path, printed):
    module, trainer = _fit(tmp_path / "bare", sleeps=False)
    with printed() as bare:
        trainer.fit(module, _loader(64, 0), _loader(8, 1))
    module, trainer = _fit(tmp_path / "ours", sleeps=True)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        m.add_reader()
        trainer.fit(module, _loader(64, 0), _loader(8, 1))
    p = passport(m)
    assert m.steps == STEPS == trainer.global_step
    assert m.tokens == STEPS * ACCUM * BATCH and m.token_unit == "samples"
    assert p["series_info"]["tokens_per_step"]["source"] == "lightning training_step batch"
    # headline: the per-step loss, the mean of the micro-batch losses (Lightning divides each by 2)
    truth = [sum(module.micro_losses[i:i + ACCUM]) / ACCUM for i in range(0, STEPS * ACCUM, ACCUM)]
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(truth, rel=1e-5)
    # the loss the module logs is its own series, never mixed into train_loss
    assert logged(m, "lightning.train_loss") and "train_loss" not in p["taps"]["summaries"]
    assert p["series_info"]["lightning.train_loss"]["source"] == "logged through lightning (tap)"
    assert module.val_slept == 2 * 2 * VAL_SLEEP_S and module.save_slept == 2 * SAVE_SLEEP_S
    assert within(p["phases_s"]["eval"], module.val_slept), p["phases_s"]
    assert within(p["phases_s"]["checkpoint"], module.save_slept), p["phases_s"]
    assert p["time"]["eval_spans"] == 2
    assert [(c["step"], c["source"]) for c in p["checkpoints"]] == [(3, "lightning save_checkpoint"),
                                                                   (6, "lightning save_checkpoint")]
    assert all(c["path"].endswith(".ckpt") and c["bytes"] > 0 for c in p["checkpoints"])
    assert p["frameworks"]["framework_steps"] == {"lightning": STEPS}
    # its training_step reads loss.item(): it runs on a meta copy only (never with real values), so it is not
    # counted, and the reason says why
    assert p["compute"]["counted_flops_per_token"] is None
    assert "meta copy only" in p["compute"]["counted_missing"] and ".item()" in p["compute"]["counted_missing"]
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_lightning_bf16_mixed_precision_is_read_inside_its_training_step(tmp_path):
    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.net(x).float(), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    trainer = L.Trainer(max_steps=3, accelerator="cpu", precision="bf16-mixed", logger=False,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        default_root_dir=str(tmp_path))
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.fit(Tiny(), _loader(32, 0))
    assert m.steps == 3 and passport(m)["compute"]["hardware"]["dtype"] == "bf16"


class EncoderHead(L.LightningModule):
    """A training_step that calls its submodules, never ``self(batch)``; it logs and counts its own calls."""

    def __init__(self, use_trainer: bool = False) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 1)
        self.use_trainer = use_trainer
        self.steps_run = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.steps_run += 1
        if self.use_trainer:
            self.trainer.strategy  # noqa: B018 - a step that reads its trainer
        loss = F.mse_loss(self.head(self.encoder(x)), y)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _encoder_fit(root, use_trainer: bool = False):
    L.seed_everything(0, verbose=False)
    module = EncoderHead(use_trainer)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(root))
    losses: list[float] = []

    class Losses(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(outputs["loss"].item())

    trainer.callbacks.append(Losses())
    return module, trainer, losses


def _one_step_flops(module: EncoderHead, batch) -> int:
    """FlopCounterMode over one forward and backward of the same layers: the truth per batch."""
    from torch.utils.flop_counter import FlopCounterMode

    x, y = batch
    counter = FlopCounterMode(display=False)
    with counter:
        F.mse_loss(module.head(module.encoder(x)), y).backward()
    return counter.get_total_flops()


def test_lightning_training_step_calling_submodules_is_counted_on_a_copy_never_the_live_module(tmp_path, printed):
    module, trainer, bare_losses = _encoder_fit(tmp_path / "bare")
    with printed() as bare:
        trainer.fit(module, _loader(32, 0))
    bare_logged = {k: float(v) for k, v in trainer.logged_metrics.items()}
    module, trainer, losses = _encoder_fit(tmp_path / "ours")
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.fit(module, _loader(32, 0))
    p = passport(m)
    assert losses == bare_losses and len(losses) == 4  # bit-identical
    assert module.steps_run == 4 and module.trainer is trainer  # the copy's step ran on the copy only
    assert {k: float(v) for k, v in trainer.logged_metrics.items()} == bare_logged  # its self.log reached no trainer
    truth = _one_step_flops(EncoderHead(), next(iter(_loader(32, 0))))
    assert p["compute"]["counted_flops_per_token"] == truth / BATCH, p["compute"]["counted_missing"]
    assert p["compute"]["unit"] == "samples" and m.tokens == 4 * BATCH
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_lightning_training_step_that_needs_its_trainer_is_not_counted_and_says_why(tmp_path):
    module, trainer, _ = _encoder_fit(tmp_path, use_trainer=True)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.fit(module, _loader(32, 0))
    c = passport(m)["compute"]
    assert c["counted_flops_per_token"] is None and module.steps_run == 4
    assert "training_step of a copy of the LightningModule raised RuntimeError" in c["counted_missing"]
    assert "the copy has no trainer" in c["counted_missing"]
