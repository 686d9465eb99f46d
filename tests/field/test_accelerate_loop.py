"""accelerate: Accelerator(gradient_accumulation_steps=2) with accumulate() and accelerator.backward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

BATCHES, BATCH, ACCUM, SEQ = 8, 4, 2, 6
SAVE_SLEEP_S = 0.8  # inside save_state (the model's state dict is read there)


def _train(save_dir=None, batches: int = BATCHES, epochs: int = 1):
    """The accumulate idiom; returns each optimizer step's micro-batch losses as ``accelerator.backward`` passes them
    to torch (divided by k: the same float32 division, so the same bits)."""
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Flatten(), torch.nn.Linear(8 * SEQ, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randint(0, 32, (batches * BATCH, SEQ), generator=g),
                                          torch.randint(0, 32, (batches * BATCH,), generator=g))
    model, opt, loader = accelerator.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=BATCH))
    steps, micro = [], []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                micro.append((loss / ACCUM).item())
                accelerator.backward(loss)
                if accelerator.sync_gradients:  # this opt.step() is a real step: its micro-batches end here
                    steps.append(micro)
                    micro = []
                opt.step()
                opt.zero_grad()
    if save_dir is not None:  # accelerate binds torch.save and safetensors at its import: its own saver is wrapped
        import time

        accelerator.unwrap_model(model).register_state_dict_post_hook(lambda *a: time.sleep(SAVE_SLEEP_S))
        accelerator.save_state(str(save_dir))
    return steps


def test_accelerate_accumulation_counts_real_steps_all_tokens_and_the_per_step_loss(tmp_path, printed):
    with printed() as bare:
        _train()
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        steps = _train()
    assert m.steps == BATCHES // ACCUM == len(steps)
    assert m.tokens == BATCHES * BATCH * SEQ and m.token_unit == "tokens"
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx([sum(s) for s in steps], rel=1e-5)
    assert m.series_info["train_loss"]["ambiguous"] is False
    assert printed_by_us(bare, ours) == [] and m.warnings == []


def test_accelerate_save_state_is_one_checkpoint_timed_against_a_sleep_inside_it(tmp_path):
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        _train(tmp_path / "state")
    p = passport(m)
    [record] = p["checkpoints"]
    assert (record["source"], record["step"], record["path"]) == ("accelerate save_state", BATCHES // ACCUM,
                                                                    str(tmp_path / "state"))
    assert p["time"]["checkpoint_saves"] == 1 and record["bytes"] > 0
    assert within(p["phases_s"]["checkpoint"], SAVE_SLEEP_S) and p["phases_s"]["eval"] == 0, p["phases_s"]


def test_accelerate_accumulate_idiom_loss_is_the_sum_of_each_steps_micro_batches_short_steps_too(tmp_path):
    """docs/spec.md section 2: a step's train_loss is the sum of the values passed to backward since the previous
    step (accelerate divides each micro-batch by k), also on each epoch's short last step (p < k micro-batches)."""
    batches, epochs = BATCHES + 1, 2  # each epoch ends with a step of one micro-batch (accelerate syncs there)
    bare = _train(batches=batches, epochs=epochs)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        steps = _train(batches=batches, epochs=epochs)
    assert steps == bare  # bit-identical micro-batch losses, bare and monitored
    assert [len(s) for s in steps] == ([ACCUM] * (BATCHES // ACCUM) + [1]) * epochs
    assert m.steps == len(steps)
    assert [v for _, v in logged(m, "train_loss")] == [sum(s) for s in steps]  # every step, the same bits
    assert m.series_info["train_loss"]["ambiguous"] is False and m.warnings == []
