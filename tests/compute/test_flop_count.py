"""The counted convention: one forward+backward under FlopCounterMode, never raising."""

from __future__ import annotations

import sys
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainmeter.compute.flop_count import counted_flops_per_token
from trainmeter.compute.flops import flops_per_token

V, T, D, L, H, B = 64, 16, 32, 2, 4, 3


class Block(nn.Module):
    def __init__(self, attention: bool) -> None:
        super().__init__()
        self.attention = attention
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        if self.attention:
            q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        else:
            y = q + k + v
        x = x + self.drop(self.proj(y))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, attention: bool = True) -> None:
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.ModuleList(Block(attention) for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.head(self.ln_f(x))


def linear_weights(model: nn.Module) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def batch() -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))


def test_meta_count_of_matmul_only_model_is_six_per_linear_weight() -> None:
    model = TinyGPT(attention=False)
    result = counted_flops_per_token(model, (batch(),), method="meta")
    assert result.method == "meta" and result.reason is None
    assert result.count == B * T and result.unit == "tokens"
    assert result.flops_per_unit == 6 * linear_weights(model)


def test_real_count_matches_meta_count_without_attention() -> None:
    model = TinyGPT(attention=False)
    meta = counted_flops_per_token(model, (batch(),), method="meta")
    real = counted_flops_per_token(model, (batch(),), method="real")
    assert real.method == "real"
    assert real.flops_per_unit == meta.flops_per_unit and real.unit == "tokens" and meta.unit == "tokens"


def test_meta_count_adds_full_square_attention_like_titan() -> None:
    model = TinyGPT(attention=True)
    result = counted_flops_per_token(model, (batch(),))
    assert result.method == "meta"
    assert result.flops_per_unit == 6 * linear_weights(model) + 12 * L * D * T and result.unit == "tokens"
    analytic = flops_per_token(model, seq_len=T)
    assert isinstance(analytic, dict)
    # Counted omits biases and norms, so it sits just under titan and above megatron.
    assert analytic["megatron"].value < result.flops_per_unit < analytic["titan"].value and result.unit == "tokens"


def test_real_cpu_count_never_exceeds_meta_count_with_attention() -> None:
    model = TinyGPT(attention=True)
    real = counted_flops_per_token(model, (batch(),), method="real")
    assert real.flops_per_unit is not None and real.unit == "tokens"
    assert 6 * linear_weights(model) <= real.flops_per_unit <= 6 * linear_weights(model) + 12 * L * D * T


def test_real_count_leaves_grads_buffers_and_rng_untouched() -> None:
    model = nn.Sequential(nn.Embedding(V, D), nn.Linear(D, D), nn.Dropout(0.5), nn.Linear(D, V))
    model.register_buffer("steps", torch.zeros(1))
    bn = nn.BatchNorm1d(T)
    full = nn.Sequential(model, bn)
    before_mean = bn.running_mean.clone()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    result = counted_flops_per_token(full, (batch(),), method="real")
    assert result.flops_per_unit is not None and result.unit == "tokens"
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(bn.running_mean, before_mean)
    assert all(p.grad is None for p in full.parameters())


def test_failing_model_returns_none_with_reason_instead_of_raising() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom in forward")

    result = counted_flops_per_token(Broken(), (torch.zeros(2, 4),), tokens=2)
    assert result.flops_per_unit is None
    assert "meta pass failed: RuntimeError: boom in forward" in result.reason
    assert "real pass failed" in result.reason
    derivation = result.derivation()
    assert derivation.value is None and "boom" in derivation.missing


def test_auto_falls_back_to_real_when_meta_cannot_run() -> None:
    class NeedsData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.lin = nn.Linear(D, V)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            scale = float(idx.max().item() > -1)  # reads data: impossible on the meta device
            return self.lin(self.emb(idx)) * scale

    result = counted_flops_per_token(NeedsData(), (batch(),))
    assert result.method == "real"
    assert result.flops_per_unit == 6 * D * V and result.unit == "tokens"
    assert result.reason.startswith("meta pass failed")


def test_tokens_come_from_input_ids_and_loss_attribute_is_used() -> None:
    class HFStyle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.lin = nn.Linear(D, V, bias=False)

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> SimpleNamespace:
            logits = self.lin(self.emb(input_ids))
            return SimpleNamespace(loss=F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits=logits)

    ids = batch()
    result = counted_flops_per_token(HFStyle(), example_kwargs={"input_ids": ids, "labels": ids})
    assert result.count == B * T and result.unit == "tokens"
    assert result.flops_per_unit == 6 * D * V
    assert result.by_operator.keys() <= {"aten.mm", "aten.addmm", "aten.bmm"}


def test_float_only_inputs_are_counted_per_sample() -> None:
    model = nn.Linear(D, D, bias=False)
    x = torch.zeros(5, D, requires_grad=False)
    per_sample = counted_flops_per_token(model, x)
    # input has no grad: backward computes only the weight gradient (2 x D x D per row), forward 2 x D x D.
    assert per_sample.unit == "samples" and per_sample.count == 5 and per_sample.reason is None
    assert per_sample.flops_per_unit == 4 * D * D and per_sample.unit == "samples"
    derivation = per_sample.derivation()
    assert derivation.unit == "FLOP/sample" and derivation.value == 4 * D * D and derivation.formula == "C / B"
    known = counted_flops_per_token(model, x, tokens=5)
    assert known.flops_per_unit == 4 * D * D and known.unit == "tokens"
    assert known.derivation().name == "flops_per_token.counted"
    assert known.derivation().unit == "FLOP/token"


def test_unknown_method_is_reported_not_raised() -> None:
    result = counted_flops_per_token(nn.Linear(2, 2), torch.zeros(1, 2), tokens=1, method="gpu")  # type: ignore[arg-type]
    assert result.flops_per_unit is None and "unknown method 'gpu'" in result.reason


class StepModule(nn.Module):
    """A LightningModule-like module: a ``training_step`` that prints, warns and calls its submodules."""

    def __init__(self, read_value: bool = False, during: Any = None) -> None:
        super().__init__()
        self.encoder, self.head = nn.Linear(D, D, bias=False), nn.Linear(D, 1, bias=False)
        self.read_value, self.during = read_value, during

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.head(self.encoder(batch)).sum()
        print("step", batch_idx)
        warnings.warn("self.log without a trainer", UserWarning, stacklevel=1)
        if self.during is not None:
            self.during()
        if self.read_value:
            print(loss.item())
        return loss


def test_a_training_step_on_the_copy_is_quiet_on_its_thread_only(capsys) -> None:
    other: list[str] = []

    def another_thread_prints_and_warns() -> None:
        def run() -> None:
            print("from another thread")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.warn("theirs", UserWarning, stacklevel=1)
            other.extend(str(w.message) for w in caught)

        t = threading.Thread(target=run)
        t.start()
        t.join(timeout=30)

    shown_before, stdout_before = warnings.showwarning, sys.stdout
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        counted = counted_flops_per_token(StepModule(during=another_thread_prints_and_warns), (torch.zeros(4, D), 0),
                                          samples=4, call="training_step")
    assert counted.flops_per_unit is not None and counted.method == "meta" and counted.unit == "samples"
    out = capsys.readouterr().out
    assert "from another thread" in out and "step 0" not in out  # the copy's print dropped, the other thread's kept
    assert other == ["theirs"] and [str(w.message) for w in ours] == []
    assert warnings.showwarning is shown_before and sys.stdout is stdout_before


def test_a_training_step_that_reads_a_value_is_never_run_on_a_real_copy() -> None:
    counted = counted_flops_per_token(StepModule(read_value=True), (torch.zeros(4, D), 0), samples=4,
                                      call="training_step")
    assert counted.flops_per_unit is None and counted.method is None
    assert "meta copy only" in counted.reason and "real pass" not in counted.reason
