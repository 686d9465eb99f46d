"""A nanoGPT-style loop: torch.compile, bf16 autocast, GradScaler, accumulation by dividing the loss.

Compiled with ``backend="eager"`` to keep the test fast on CPU: graph capture, guards
and recompiles are Dynamo's, whatever the backend.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, printed_by_us  # noqa: E402

ITERS, ACCUM, BATCH, SEQ, VOCAB = 4, 2, 2, 8, 32


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, 16)
        self.wpe = nn.Embedding(SEQ, 16)
        self.ln = nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, VOCAB)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        x = x + self.mlp(self.ln(x))
        logits = self.head(x)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def _train():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = TinyGPT()
    opt = model.configure_optimizers()  # built inside the model's method, before compile (as nanoGPT)
    model = torch.compile(model, backend="eager")
    scaler = torch.amp.GradScaler("cpu")
    micro = []
    for _ in range(ITERS):
        for _ in range(ACCUM):
            x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = model(x, x)
                micro.append(loss.item())
                loss = loss / ACCUM
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return model, micro, {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles", "frames")}


def test_compiled_autocast_scaler_loop_compiles_no_extra_graph_and_records_the_unscaled_loss(tmp_path, printed):
    with printed() as bare:
        _, bare_micro, bare_counts = _train()
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        model, micro, counts = _train()
    assert counts == bare_counts and bare_counts["stats"]["unique_graphs"] >= 1
    assert micro == bare_micro  # same numbers
    assert m.steps == ITERS and m.tokens == ITERS * ACCUM * BATCH * SEQ
    truth = [sum(micro[i:i + ACCUM]) / ACCUM for i in range(0, ITERS * ACCUM, ACCUM)]
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(truth, rel=1e-5)  # not x65536
    assert "GradScaler" in m.series_info["train_loss"]["note"]
    assert printed_by_us(bare, ours) == [] and m.warnings == []
    # nothing left behind: the compiled model runs on after the run with no new graph and no warning
    before = counters["stats"]["unique_graphs"]
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    with printed() as after, torch.autocast("cpu", dtype=torch.bfloat16):
        model(x, x)
    assert counters["stats"]["unique_graphs"] == before and after.warnings == [] and after.lines == set()
    assert "__call__" not in vars(TinyGPT) and not hasattr(type(model).__call__, "__trainmeter_original__")
