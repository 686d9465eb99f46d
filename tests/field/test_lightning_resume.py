"""Lightning's own resume (``trainer.fit(ckpt_path=...)``) under ``--resume``: the step resumed from is the trainer's
``global_step`` once the checkpoint was restored, matched to the parent's checkpoint record (docs/spec.md
section 22)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lightning")

import lightning as L  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport  # noqa: E402

STEPS, BATCH, SAVE_EVERY, STOP_AT = 12, 4, 4, 10


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == STOP_AT - 1 and self.stops:
            tm.stop()  # carried out at the step's end: the fit stops after step STOP_AT
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader():
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=BATCH)


def _fit(root, stops: bool):
    from lightning.pytorch.callbacks import ModelCheckpoint

    L.seed_everything(0, verbose=False)
    module = Regressor()
    module.stops = stops
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(root), num_sanity_val_steps=0,
                        callbacks=[ModelCheckpoint(dirpath=str(root / "ckpt"), filename="{step}",
                                                   every_n_train_steps=SAVE_EVERY, save_top_k=-1)])
    return module, trainer


def test_lightning_ckpt_path_is_the_step_resumed_from_read_from_the_trainer_and_the_training_counts_on(tmp_path):
    module, trainer = _fit(tmp_path, stops=True)
    with tm.monitor(name="pl-first", run_dir=tmp_path / "runs", interval_s=3600, budget_steps=STEPS) as m1:
        trainer.fit(module, _loader())
    first = passport(m1)
    assert first["status"] == "stopped" and first["steps"] == STOP_AT == trainer.global_step
    assert [c["step"] for c in first["checkpoints"]] == [4, 8]
    module, trainer = _fit(tmp_path, stops=False)
    with tm.monitor(name="pl-second", run_dir=tmp_path / "runs", interval_s=3600, budget_steps=STEPS,
                    resume="pl-first") as m:
        trainer.fit(module, _loader(), ckpt_path=str(tmp_path / "ckpt" / "step=8.ckpt"))
    p = passport(m)
    lineage = p["lineage"]
    resumed = lineage["resumed_from"]
    assert resumed["step"] == resumed["parent_step"] == resumed["framework_step"] == 8
    assert resumed["provenance"] == "detected" and resumed["framework"] == "lightning"
    assert "trainer.global_step 8" in resumed["source"] and "parent's checkpoint" in resumed["source"]
    assert resumed["checkpoint"] == first["checkpoints"][-1]["path"]
    assert lineage["lost_work"]["steps"] == STOP_AT - 8
    assert p["steps"] == STEPS - 8 and lineage["training"]["steps"] == STEPS == trainer.global_step
    assert p["frameworks"]["framework_steps"] == {"lightning": STEPS}  # Lightning's own count, over the training
    assert lineage["training"]["tokens"] == STEPS * BATCH and lineage["training"]["token_unit"] == "samples"
    assert p["compute"]["progress"] == pytest.approx(1.0)
    assert not any("counted" in w for w in p["warnings"])
