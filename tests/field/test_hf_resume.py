"""Hugging Face Trainer's own resume (``train(resume_from_checkpoint=...)``) under ``--resume``: the step resumed from
is read from the Trainer, matched to the parent's checkpoint record (docs/spec.md section 22)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport, token_rows  # noqa: E402

SEQ, BATCH, STEPS, SAVE_EVERY, STOP_AT = 16, 2, 12, 4, 10


def _trainer(out_dir, callbacks=()):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=str(out_dir), max_steps=STEPS, per_device_train_batch_size=BATCH,
                             save_strategy="steps", save_steps=SAVE_EVERY, report_to="none", use_cpu=True,
                             disable_tqdm=True, seed=0, dataloader_num_workers=0, logging_steps=1)
    return Trainer(model=model, args=args, train_dataset=token_rows(64, SEQ), callbacks=list(callbacks))


def _losses(trainer) -> list[float]:
    """The Trainer's logged losses of the steps after 8 (its history holds the checkpoint's too)."""
    return [e["loss"] for e in trainer.state.log_history if "loss" in e and e["step"] > 8]


def _first_run(tmp_path):
    """Steps 1-10 with the Trainer's own checkpoints at 4 and 8, stopped after step 10 (``tm.stop()`` at 9)."""
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == STOP_AT - 1:  # carried out at the next step boundary
                tm.stop()

    with tm.monitor(name="hf-first", run_dir=tmp_path / "runs", interval_s=3600, budget_steps=STEPS) as m:
        _trainer(tmp_path / "out", [StopAt()]).train()
    return m


def test_hf_resume_from_checkpoint_is_the_step_resumed_from_read_from_the_trainer_and_the_training_counts_on(tmp_path):
    first = passport(_first_run(tmp_path))
    assert first["status"] == "stopped" and first["steps"] == STOP_AT
    assert [c["step"] for c in first["checkpoints"]] == [4, 8]
    bare = _trainer(tmp_path / "bare")
    bare.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-8"))
    trainer = _trainer(tmp_path / "out")
    with tm.monitor(name="hf-second", run_dir=tmp_path / "runs", interval_s=3600, budget_steps=STEPS,
                    resume="hf-first") as m:
        trainer.train(resume_from_checkpoint=True)  # the output_dir's last checkpoint, checkpoint-8
    p = passport(m)
    lineage = p["lineage"]
    resumed = lineage["resumed_from"]
    assert resumed["step"] == resumed["parent_step"] == resumed["framework_step"] == 8
    assert resumed["provenance"] == "detected" and resumed["framework"] == "hf"
    assert "state.global_step 8" in resumed["source"] and "parent's checkpoint" in resumed["source"]
    assert resumed["checkpoint"] == first["checkpoints"][-1]["path"]
    assert lineage["lost_work"]["steps"] == STOP_AT - 8
    assert p["steps"] == STEPS - 8 and lineage["training"]["steps"] == STEPS == trainer.state.global_step
    assert p["frameworks"]["framework_steps"] == {"hf": STEPS}  # the Trainer's own count, over the training
    assert lineage["training"]["tokens"] == STEPS * BATCH * SEQ and lineage["training"]["token_unit"] == "tokens"
    assert p["compute"]["progress"] == pytest.approx(1.0)
    assert _losses(trainer) == _losses(bare) and len(_losses(bare)) == STEPS - 8  # bit-identical to a bare resume
    assert "Resumed from step 8 (detected: HF Trainer" in (m.run_dir / "passport.md").read_text()


def test_hf_resume_without_the_resume_flag_says_the_run_counts_its_own_steps(tmp_path):
    _first_run(tmp_path)
    with pytest.warns(UserWarning, match="hf resumed its training at its step 8: this run counts its own steps"):
        with tm.monitor(name="alone", run_dir=tmp_path / "runs", interval_s=3600) as m:
            _trainer(tmp_path / "out").train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-8"))
    p = passport(m)
    assert "lineage" not in p and p["steps"] == STEPS - 8
    assert not any("counted" in w for w in p["warnings"])  # the step comparison starts at the resumed step


KILLED = """
import sys, time, trainmeter as tm
from transformers import TrainerCallback
from tests.field.test_hf_resume import _trainer

class Slow(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(0.2)

with tm.monitor(name="hf-killed", run_dir=sys.argv[1], interval_s=0.2):
    trainer = _trainer(sys.argv[2], [Slow()])
    trainer.args.max_steps = 10_000
    trainer.train()
"""


@pytest.mark.slow  # a second process importing transformers: about 20 s on 2 busy cores
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
def test_hf_trainer_killed_after_its_save_steps_checkpoint_is_resumed_from_it_read_from_the_killed_runs_log(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(tmp_path / "runs"), str(tmp_path / "out")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    try:
        while not (tmp_path / "out" / "checkpoint-4").exists() or not any(
                e.get("kind") == "checkpoint" for f in (tmp_path / "runs").glob("*-hf-killed")
                for e in tm.load(f).events()):
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint before the kill"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (folder,) = (tmp_path / "runs").glob("*-hf-killed")
    assert not (folder / "passport.json").exists()
    last = max(int(p.name.split("-")[1]) for p in (tmp_path / "out").glob("checkpoint-*"))  # 4, or 8 by the kill
    logged = tm.load(folder).passport["checkpoints"]
    assert [(c["path"], c["source"]) for c in logged][:1] == [
        (str(tmp_path / "out" / "checkpoint-4"), "transformers Trainer checkpoint")]
    trainer = _trainer(tmp_path / "out")
    with tm.monitor(name="hf-after-kill", run_dir=tmp_path / "runs", interval_s=3600, resume="last") as m:
        trainer.train(resume_from_checkpoint=True)  # the output_dir's last checkpoint
    resumed = passport(m)["lineage"]["resumed_from"]
    assert (resumed["parent_step"], resumed["framework_step"], resumed["provenance"], resumed["framework"]) == (
        last, last, "detected", "hf")
    assert resumed["checkpoint"] == str(tmp_path / "out" / f"checkpoint-{last}")
    assert passport(m)["steps"] == STEPS - last
