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


def _train(save_dir=None, batches: int = BATCHES):
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Flatten(), torch.nn.Linear(8 * SEQ, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randint(0, 32, (batches * BATCH, SEQ), generator=g),
                                          torch.randint(0, 32, (batches * BATCH,), generator=g))
    model, opt, loader = accelerator.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=BATCH))
    micro = []
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(x), y)
            micro.append(loss.item())
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
    if save_dir is not None:  # accelerate binds torch.save and safetensors at its import: its own saver is wrapped
        import time

        accelerator.unwrap_model(model).register_state_dict_post_hook(lambda *a: time.sleep(SAVE_SLEEP_S))
        accelerator.save_state(str(save_dir))
    return micro


def test_accelerate_accumulation_counts_real_steps_all_tokens_and_the_per_step_loss(tmp_path, printed):
    with printed() as bare:
        _train()
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        micro = _train()
    assert m.steps == BATCHES // ACCUM
    assert m.tokens == BATCHES * BATCH * SEQ and m.token_unit == "tokens"
    truth = [sum(micro[i:i + ACCUM]) / ACCUM for i in range(0, BATCHES, ACCUM)]
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(truth, rel=1e-5)
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


def test_accelerates_short_last_accumulation_step_shows_its_whole_loss_not_half(tmp_path):
    odd = BATCHES + 1  # the last optimizer step has one micro-batch, divided by 2 like the full ones
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        micro = _train(batches=odd)
    assert m.steps == odd // ACCUM + 1
    truth = [sum(micro[i:i + ACCUM]) / len(micro[i:i + ACCUM]) for i in range(0, odd, ACCUM)]
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(truth, rel=1e-5)
    assert "1 short accumulation step(s)" in passport(m)["series_info"]["train_loss"]["note"]
    assert m.warnings == []
