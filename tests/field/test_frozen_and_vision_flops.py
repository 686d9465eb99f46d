"""FLOPs of frozen weights (LoRA, a frozen backbone with a trained head) and of vision models, against FlopCounterMode.

The truth is one forward and backward of the model itself under ``FlopCounterMode`` (run here by the test,
not by trainmeter). The analytic conventions must agree within 10% for language models (frozen or not), the
counted pass must agree on every model, and a vision model is counted per sample with the conventions withheld.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport  # noqa: E402
from trainmeter.compute.flop_count import counted_flops_per_token  # noqa: E402
from trainmeter.compute.flops import flops_per_token, shape_from_module  # noqa: E402

BATCH, SEQ, VOCAB, WIDTH = 2, 32, 256, 64
TOLERANCE = 0.10


def _truth(model: nn.Module, *args, **kwargs) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(*args, **kwargs)
        loss = out.loss if hasattr(out, "loss") else out.float().sum()
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=WIDTH, n_head=4, vocab_size=VOCAB, n_positions=64,
                                     eos_token_id=0, bos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _lora(model: nn.Module) -> nn.Module:
    peft = pytest.importorskip("peft")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))


def _frozen_backbone(model: nn.Module) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    model.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)  # a new, trained head on the frozen backbone
    return model


@pytest.mark.parametrize("variant", ["full", "lora", "frozen_backbone"])
def test_conventions_and_the_counted_pass_agree_with_flop_counter_mode(variant: str) -> None:
    model = {"full": lambda m: m, "lora": _lora, "frozen_backbone": _frozen_backbone}[variant](_gpt2())
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    truth = _truth(model, input_ids=ids, labels=ids) / ids.numel()
    shape = shape_from_module(model).with_value("seq_len", SEQ, "detected", "test batch")
    analytic = flops_per_token(shape, "titan").value  # full-square attention, as FlopCounterMode counts it
    counted = counted_flops_per_token(model, example_kwargs={"input_ids": ids, "labels": ids})
    assert counted.flops_per_unit == pytest.approx(truth, rel=TOLERANCE) and counted.unit == "tokens", counted.reason
    assert analytic == pytest.approx(truth, rel=TOLERANCE)
    if variant != "full":
        assert shape.frozen and shape.n_trained_params < shape.n_params
        assert flops_per_token(shape, "hf").value == pytest.approx(truth, rel=TOLERANCE)


def test_lora_passport_states_total_trained_and_frozen_parameters(tmp_path: Path) -> None:
    model = _lora(_gpt2())
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    g = torch.Generator().manual_seed(2)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        for _ in range(3):
            ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
    compute = passport(m)["compute"]
    assert compute["parameters"] == {"total": total, "trained": trained, "frozen": total - trained}
    md = (Path(m.run_dir) / "passport.md").read_text()
    assert f"Parameters: {total:,} total; {trained:,} trained; {total - trained:,} frozen" in md
    hf = compute["flops_per_token"]["hf"]
    assert hf > 6 * trained * 10  # the forward passes through every weight, not only the adapters


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class TinyResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(ResidualBlock(16), ResidualBlock(16))
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(F.relu(self.stem(x))).mean((2, 3)))


class TinyViT(nn.Module):
    def __init__(self, classes: int = 10, patch: int = 4, width: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, width, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, (16 // patch) ** 2, width))
        layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.encoder(tokens).mean(1))


@pytest.mark.parametrize("build", [TinyResNet, TinyViT])
def test_vision_models_are_counted_per_sample_against_flop_counter_mode(build) -> None:
    torch.manual_seed(0)
    model = build()
    images = torch.randn(4, 3, 16, 16)
    with torch.device("meta"):  # the CPU's fused attention kernel has no FLOP formula: count it where it has one
        truth = _truth(build(), torch.empty(4, 3, 16, 16)) / 4
    counted = counted_flops_per_token(model, (images,), method="meta")
    assert counted.unit == "samples" and counted.count == 4
    assert counted.flops_per_unit == pytest.approx(truth, rel=TOLERANCE) and counted.unit == "samples", counted.reason
    six_n = 6 * sum(p.numel() for p in model.parameters())
    assert counted.flops_per_unit > 3 * six_n  # a conv net reuses its weights at every position


def test_a_monitored_vision_run_is_in_samples_with_conventions_withheld(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(3)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600, peak_tflops=0.001, peak_source="test figure") as m:
        for _ in range(3):
            x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    p = passport(m)
    c = p["compute"]
    assert p["token_unit"] == "samples" and c["unit"] == "samples"
    assert c["flops_per_token"] == {} and "transformer language models" in c["conventions_missing"]
    assert c["counted_flops_per_token"] == pytest.approx(_truth(TinyResNet(), torch.randn(4, 3, 16, 16)) / 4,
                                                         rel=TOLERANCE)
    assert c["mfu"]["counted"] is not None and set(c["mfu"]) == {"counted"}
    d = {x["name"]: x for x in p["derivations"]}
    assert d["flops_per_token.counted"]["unit"] == "FLOP/sample"
    assert {i["unit"] for i in d["mfu[counted]"]["inputs"]} >= {"FLOP/sample", "samples/s"}
    md = (Path(m.run_dir) / "passport.md").read_text()
    assert "FLOP/sample" in md and "/token" not in md.split("### Compute")[1].split("<details>")[0]
    view = m.extension("compute")
    assert view.unit == "samples" and view.conventions_missing


def test_timm_models_or_the_reason_timm_is_skipped() -> None:
    try:
        import timm
    except Exception as exc:  # noqa: BLE001 - timm needs torchvision, whose wheel may not load beside this torch
        pytest.skip(f"timm cannot import here ({type(exc).__name__}: {exc}); tested with hand-built models above")
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    images = torch.randn(2, 3, 64, 64)
    truth = _truth(model, images) / 2
    counted = counted_flops_per_token(model, (images,), method="meta")
    assert counted.flops_per_unit == pytest.approx(truth, rel=TOLERANCE) and counted.unit == "samples"
