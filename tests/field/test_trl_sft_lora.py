"""TRL ``SFTTrainer`` with a PEFT LoRA adapter on GPT-2 from a config, a word-level tokenizer built in code."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")
datasets = pytest.importorskip("datasets")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

STEPS, BATCH, SEQ, SAVE_EVERY = 4, 4, 16, 2
SAVE_SLEEP_S = 0.8  # inside each adapter save (the model's state dict is read there)


def _tokenizer():
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(62)} | {"[PAD]": 62, "[EOS]": 63}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[PAD]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]")


def _trainer(out_dir, sleeps: bool):
    import transformers
    from peft import LoraConfig
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import SFTConfig, SFTTrainer

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                       pad_token_id=62, eos_token_id=63))
    slept: list[float] = []
    if sleeps:
        def sleep(*_):
            time.sleep(SAVE_SLEEP_S)
            slept.append(SAVE_SLEEP_S)

        model.register_state_dict_post_hook(sleep)
    ids = torch.randint(0, 62, (32, SEQ), generator=torch.Generator().manual_seed(0)).tolist()
    args = SFTConfig(output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=BATCH, logging_steps=1,
                     report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="steps",
                     save_steps=SAVE_EVERY, seed=0, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_dict({"input_ids": ids}),
                         processing_class=_tokenizer(),
                         peft_config=LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM"))
    return trainer, slept


@pytest.mark.slow
def test_sft_with_lora_counts_steps_tokens_and_loss_and_times_each_adapter_checkpoint_once(tmp_path, printed):
    bare_trainer, _ = _trainer(tmp_path / "bare", sleeps=False)
    with printed() as bare:
        bare_trainer.train()
        bare_trainer.model.save_pretrained(str(tmp_path / "bare-adapter"))
    trainer, slept = _trainer(tmp_path / "out", sleeps=True)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
        trainer.model.save_pretrained(str(tmp_path / "adapter"))  # PeftModel's own saver, bound at peft's import
    p = passport(m)
    assert m.steps == STEPS == trainer.state.global_step
    assert [(s, v) for s, v in logged(m, "num_tokens")][-1] == (STEPS, m.tokens) == (STEPS, STEPS * BATCH * SEQ)
    assert p["series_info"]["tokens_per_step"]["source"] == "hf training_step inputs"  # SFTTrainer's, through HF's
    hf_loss = dict(logged(m, "loss"))
    ours_loss = dict(logged(m, "train_loss"))
    assert sorted(ours_loss) == sorted(hf_loss) == list(range(1, STEPS + 1))
    assert all(ours_loss[s] == pytest.approx(v, rel=1e-4) for s, v in hf_loss.items())
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in bare_trainer.state.log_history if "loss" in h]  # bit-identical
    # two Trainer checkpoints and one adapter save: three checkpoints, each its sleep, none in eval or training
    assert [(c["step"], c["source"]) for c in p["checkpoints"]] == [
        (2, "transformers Trainer checkpoint"), (4, "transformers Trainer checkpoint"), (4, "peft save_pretrained")]
    assert len(slept) == 3 and within(p["phases_s"]["checkpoint"], sum(slept)), p["phases_s"]
    assert p["phases_s"]["eval"] == 0 and p["time"]["checkpoint_saves"] == 3
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []
