"""Hugging Face Trainer: checkpoints asked of trainmeter go through its saver, each into its own folder named for
its step; nan:checkpoint-stop saves the finite weights of the step before the NaN (docs/spec.md section 21)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport, token_rows  # noqa: E402

SEQ, BATCH, STEPS = 16, 2, 10
NAN_STEP = 6  # the Trainer's global step whose loss is NaN


def _trainer(out_dir, callbacks=(), trainer_class=None):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=BATCH,
                             save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
                             dataloader_num_workers=0, logging_steps=1)
    return (trainer_class or Trainer)(model=model, args=args, train_dataset=token_rows(64, SEQ), callbacks=list(callbacks))


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_hf_trainer_checkpoints_asked_at_two_steps_are_two_folders_each_holding_its_steps_weights(tmp_path):
    from transformers import TrainerCallback

    class Ask(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (3, 8):
                assert tm.checkpoint() is True

    trainer = _trainer(tmp_path / "out", [Ask()])
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    p = passport(m)
    assert [(c["path"], c["step"]) for c in p["checkpoints"]] == [("checkpoints/step-4", 4), ("checkpoints/step-9", 9)]
    four, nine = (_weights(m.run_dir / c["path"]) for c in p["checkpoints"])
    assert any(not torch.equal(four[k], nine[k]) for k in four)  # two states, not one folder written twice
    assert all(c["bytes"] > 0 for c in p["checkpoints"])


def test_hf_trainer_nan_checkpoint_stop_saves_the_finite_weights_of_the_step_before_through_its_saver(tmp_path):
    from transformers import Trainer, TrainerCallback

    class NanAt(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            return loss * float("nan") if self.state.global_step == NAN_STEP - 1 else loss

    kept: dict[int, dict] = {}

    class Keep(TrainerCallback):  # the test's own record of the weights after each step
        def on_step_end(self, args, state, control, model=None, **kwargs):
            kept[state.global_step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    trainer = _trainer(tmp_path / "out", [Keep()], NanAt)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600, alert=["nan:checkpoint-stop"]) as m:
        trainer.train()
    p = passport(m)
    assert p["status"] == "stopped" and p["stopped_at_step"] == NAN_STEP and p["stopped_via"] == "hf"
    [ckpt] = p["checkpoints"]
    assert ckpt["path"] == f"checkpoints/step-{NAN_STEP - 1}" and ckpt["step"] == NAN_STEP - 1
    assert "recovery point" in ckpt["recovery"]
    saved = _weights(m.run_dir / ckpt["path"])
    assert all(torch.isfinite(t).all() for t in saved.values())
    before = kept[NAN_STEP - 1]
    assert all(torch.equal(t, before[k]) for k, t in saved.items())
    assert not all(torch.isfinite(t).all() for t in kept[NAN_STEP].values())  # the step itself ran unchanged
