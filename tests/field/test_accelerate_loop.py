"""accelerate: Accelerator(gradient_accumulation_steps=2) with accumulate() and accelerator.backward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, printed_by_us  # noqa: E402

BATCHES, BATCH, ACCUM, SEQ = 8, 4, 2, 6


def _train():
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Flatten(), torch.nn.Linear(8 * SEQ, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randint(0, 32, (BATCHES * BATCH, SEQ), generator=g),
                                          torch.randint(0, 32, (BATCHES * BATCH,), generator=g))
    model, opt, loader = accelerator.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=BATCH))
    micro = []
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(x), y)
            micro.append(loss.item())
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
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
