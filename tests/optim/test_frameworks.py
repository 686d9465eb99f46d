"""Hugging Face Trainer and Lightning runs: their own gradient norm and learning rate arrive with no code change."""

from __future__ import annotations

import pytest
import torch

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.integrations.extension import pair
from trainmeter.optim.extension import OptimExtension
from trainmeter.optim.grad_norm import CLIP_SOURCE
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events

pytestmark = pytest.mark.slow


def _points(m, name):
    out = []
    for event in read_events(m.run_dir / "events.jsonl"):
        if event["kind"] == "series" and event["name"] == name:
            out += list(zip(event["step"], event["value"], strict=True))
    return out


def _monitor(run_root, ext):
    return make_monitor(make_options(run_dir=run_root, interval_s=3600, name="fw"), clock=FakeClock(), text=False,
                        extensions=[*pair(), ext])


def _tiny_gpt2(transformers, samples):
    """A one-layer GPT-2 from a config (nothing downloaded) and ``samples`` rows of 8 tokens."""
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    return model, [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))}
                   for _ in range(samples)]


def test_hf_trainer_grad_norm_and_lr_are_the_ones_it_logs(run_root, tmp_path):
    transformers = pytest.importorskip("transformers")
    model, data = _tiny_gpt2(transformers, 16)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, logging_steps=2, max_grad_norm=1.0, learning_rate=1e-3,
        lr_scheduler_type="cosine", per_device_train_batch_size=2, report_to=[], save_strategy="no",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    logged: list[dict] = []

    class Keep(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "grad_norm" in logs:
                logged.append({"step": state.global_step, **logs})

    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Keep()]).train()
    m.finish("completed")
    ours = dict(_points(m, "lr"))
    assert sorted(ours) == [1, 2, 3, 4, 5, 6]
    norms = _points(m, "grad_norm")
    assert [s for s, _ in norms if s % 2] == [1, 3, 5]  # every step from its clip call
    assert [row["step"] for row in logged] == [2, 4, 6]
    for row in logged:  # what the Trainer logs is what its clip call returned at that step
        at_step = [v for s, v in norms if s == row["step"]]
        assert at_step and all(v == pytest.approx(row["grad_norm"], rel=1e-6) for v in at_step)
        assert ours[row["step"]] == pytest.approx(row["learning_rate"], rel=1e-6)
    assert ext.passport_section()["grad_norm"]["missing"] is None


def test_hf_trainer_without_clipping_still_gives_the_norm_it_asks_for_with_an_infinite_limit(run_root, tmp_path):
    transformers = pytest.importorskip("transformers")
    model, data = _tiny_gpt2(transformers, 8)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, logging_steps=1, max_grad_norm=0.0, report_to=[],
        per_device_train_batch_size=2, save_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0)
    logged: dict[int, float] = {}

    class Keep(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "grad_norm" in logs:
                logged[state.global_step] = logs["grad_norm"]

    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Keep()]).train()
    m.finish("completed")
    norms = _points(m, "grad_norm")
    assert sorted(logged) == [1, 2, 3, 4]
    assert [s for s, _ in norms if s not in logged] == []
    assert sorted({s for s, _ in norms}) == [1, 2, 3, 4]  # one norm per step, nothing was clipped
    for step, value in norms:
        assert value == pytest.approx(logged[step], rel=1e-6)
    section = ext.passport_section()["grad_norm"]
    assert section["missing"] is None and section["clip_norm_calls"] == 4


def test_lightning_gradient_clipping_gives_its_grad_norm(run_root, tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    seen: list[float] = []
    original = torch.nn.utils.clip_grad_norm_

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def on_before_optimizer_step(self, optimizer):
            # the norm Lightning's clip will return: the same call on the same gradients, outside the run's patch
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            seen.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))
            self.lrs.append(optimizer.param_groups[0]["lr"])

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=4)
    module = Tiny()
    module.lrs = []
    trainer = pl.Trainer(max_steps=5, gradient_clip_val=0.5, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    trainer.fit(module, data)
    m.finish("completed")
    assert torch.nn.utils.clip_grad_norm_ is original
    assert [v for _, v in _points(m, "grad_norm")] == pytest.approx(seen, rel=1e-6)
    assert [v for _, v in _points(m, "lr")] == pytest.approx(module.lrs, rel=1e-12)
    assert len(set(module.lrs)) == 5  # the schedule moved every step
    assert ext.passport_section()["grad_norm"]["source"] == CLIP_SOURCE
