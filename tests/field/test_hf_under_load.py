"""Hugging Face Trainer on a loaded machine: every micro-batch's tokens counted, run after run (issue 37, defect B).

20 steps of 4 x 32 tokens (and with accumulation 2), each run 20 times beside two CPU burners. The Trainer's
forward takes a ``num_items_in_batch`` whose value the loss reads, so the counted pass's meta copy fails and the CPU
model is counted by a real pass; that pass ran on the report worker with the probes paused, and the training
thread's batches meanwhile went uncounted: 2,304 and 2,432 of 2,560 tokens in 2 runs of 4, exact when idle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import token_rows  # noqa: E402
from trainmeter.record.runlog import read_events  # noqa: E402

SEQ, STEPS, BATCH, REPEATS = 32, 20, 4, 20


def _trainer(out_dir: Path, accumulation: int):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    args = TrainingArguments(
        output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=accumulation, logging_steps=1, report_to="none", use_cpu=True,
        disable_tqdm=True, seed=0, dataloader_num_workers=0, save_strategy="no")
    return Trainer(model=model, args=args, train_dataset=token_rows(STEPS * BATCH * accumulation, SEQ))


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 2])
def test_hf_trainer_counts_every_micro_batch_beside_cpu_burners(tmp_path, cpu_burners, accumulation):
    transformers.logging.set_verbosity_error()
    per_step = accumulation * BATCH * SEQ
    failures = []
    for repeat in range(REPEATS):
        trainer = _trainer(tmp_path / f"out{repeat}", accumulation)
        with tm.monitor(name="hf", run_dir=tmp_path / "runs", interval_s=0.1) as m:
            trainer.train()
        passport = json.loads((Path(m.run_dir) / "passport.json").read_text())
        tokens = {}
        for event in read_events(Path(m.run_dir) / "events.jsonl"):
            if event["kind"] == "steps" and event["name"] == "tokens_per_step":
                tokens.update(zip(event["step"], event["value"], strict=True))
        wrong = sorted(step for step in range(1, STEPS + 1) if tokens.get(step) != per_step)
        if (passport["steps"], passport["tokens"]) != (STEPS, STEPS * per_step) or wrong:
            failures.append(f"run {repeat}: {passport['steps']} steps, {passport['tokens']:,} of "
                            f"{STEPS * per_step:,} tokens; steps short of {per_step}: {wrong}")
        info = passport["series_info"]["tokens_per_step"]
        assert info["provenance"] == "counted" and info["source"] == "hf training_step inputs"
    assert not failures, "\n".join(failures)
