"""Hugging Face Trainer: GPT-2 from a config, accumulation 2, eval and save steps."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

SEQ = 32  # batches are 32 long while the config allows 64 positions
STEPS, BATCH, ACCUM = 6, 2, 2
EVAL_SLEEP_S = 1.0  # per eval item; 2 items per eval, 2 evals
SAVE_SLEEP_S = 1.5  # per checkpoint, 2 checkpoints


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int, sleep_s: float = 0.0, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 64, (n, SEQ), generator=g)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _trainer(out_dir, sleeps: bool):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=1, n_head=2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    slept: list[float] = []
    if sleeps:  # save_pretrained reads the model's state dict: sleep there (inside the checkpoint)
        def sleep(module, state_dict, prefix, local_metadata):
            time.sleep(SAVE_SLEEP_S)
            slept.append(SAVE_SLEEP_S)

        model.register_state_dict_post_hook(sleep)
    args = TrainingArguments(
        output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=BATCH, per_device_eval_batch_size=2,
        gradient_accumulation_steps=ACCUM, eval_strategy="steps", eval_steps=3, save_strategy="steps", save_steps=3,
        logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0,
        save_only_model=True)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(64), optimizers=(opt, None),
                      eval_dataset=Rows(2, EVAL_SLEEP_S if sleeps else 0.0, seed=1))
    return trainer, slept


@pytest.mark.slow
def test_hf_trainer_steps_tokens_loss_eval_checkpoint_and_nothing_printed(tmp_path, printed):
    bare_trainer, _ = _trainer(tmp_path / "bare", sleeps=False)
    with printed() as bare:
        bare_trainer.train()
    trainer, slept = _trainer(tmp_path / "out", sleeps=True)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    p = passport(m)
    assert m.steps == STEPS == trainer.state.global_step
    assert m.tokens == STEPS * ACCUM * BATCH * SEQ and m.token_unit == "tokens"
    assert p["series_info"]["tokens_per_step"]["source"] == "hf training_step inputs"  # each micro-batch's
    # the headline is the per-step loss the Trainer itself logs as `loss` (logging_steps=1)
    ours_loss = dict(logged(m, "train_loss"))
    hf_loss = dict(logged(m, "loss"))
    assert sorted(ours_loss) == sorted(hf_loss) == list(range(1, STEPS + 1))
    for step, value in hf_loss.items():
        assert ours_loss[step] == pytest.approx(value, rel=1e-4)
    assert p["series_info"]["train_loss"]["ambiguous"] is False
    assert [s for s, _ in logged(m, "grad_norm")] == list(range(1, STEPS + 1))  # once per step, not twice
    assert "train_runtime" in p["taps"]["summaries"]["transformers"]
    assert not any(name in p["series"] for name in ("train_runtime", "transformers.train_loss"))
    assert within(p["phases_s"]["eval"], 2 * 2 * EVAL_SLEEP_S), p["phases_s"]
    assert len(slept) == 2 and within(p["phases_s"]["checkpoint"], sum(slept)), p["phases_s"]
    assert p["time"]["checkpoint_saves"] == 2 and p["time"]["eval_spans"] == 2  # one per checkpoint, not per file
    assert [(c["step"], c["source"]) for c in p["checkpoints"]] == [(3, "transformers Trainer checkpoint"),
                                                                   (6, "transformers Trainer checkpoint")]
    assert all(c["path"].endswith(f"checkpoint-{c['step']}") and c["bytes"] > 0 for c in p["checkpoints"])
    s_input = next(i for d in p["derivations"] if d["name"] == "flops_per_token.megatron" for i in d["inputs"]
                   if i["name"] == "S")
    assert s_input["value"] == SEQ and s_input["provenance"] == "detected"
    assert p["compute"]["counted_flops_per_token"] is not None
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []
