"""FLOPs-per-token conventions, the model's shape and its provenance."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from trainmeter.compute.flops import (
    CONVENTIONS,
    FORMULAS,
    ModelShape,
    flops_per_token,
    flops_range,
    override_shape,
    shape_from_config,
    shape_from_module,
    validate_convention,
)

# Seed 004: 1.04B GPT-2 style model, d 2048, 18 layers, context 1024.
PIN_N = 1_039_622_144
PIN_E = 32_000 * 2048 + 1024 * 2048
PIN_GFLOPS = {"hf": 5.83, "megatron": 6.06, "titan": 6.28, "embeddings": 6.69}
GPT2_PIN_CONFIG = {
    "model_type": "gpt2",
    "vocab_size": 32000,
    "n_positions": 1024,
    "n_embd": 2048,
    "n_layer": 18,
    "n_head": 16,
    "n_inner": None,
    "activation_function": "gelu_new",
    "tie_word_embeddings": False,
}


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.n_head = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


class GPT(nn.Module):
    def __init__(self, vocab: int, positions: int, d: int, layers: int, heads: int, tied: bool = False) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight


def pin_model() -> GPT:
    with torch.device("meta"):
        return GPT(32000, 1024, 2048, 18, 16)


def giga(value: float | None) -> float:
    assert value is not None
    return round(value / 1e9, 2)


def test_pin_module_on_meta_device_gives_seed_figures_for_all_conventions() -> None:
    model = pin_model()
    assert next(model.parameters()).device.type == "meta"
    derivations = flops_per_token(model, seq_len=1024)
    assert isinstance(derivations, dict)
    assert {c: giga(d.value) for c, d in derivations.items()} == PIN_GFLOPS
    shape = shape_from_module(model)
    assert (shape.n_params, shape.n_embedding_params, shape.layers, shape.d_model) == (PIN_N, PIN_E, 18, 2048)


def test_pin_config_dict_gives_same_n_and_seed_figures() -> None:
    shape = shape_from_config(GPT2_PIN_CONFIG)
    assert shape.n_params == PIN_N
    assert shape.n_embedding_params == PIN_E
    derivations = flops_per_token(GPT2_PIN_CONFIG, seq_len=1024)
    assert isinstance(derivations, dict)
    assert {c: giga(d.value) for c, d in derivations.items()} == PIN_GFLOPS


def test_pin_exact_values_match_formulas() -> None:
    lds = 18 * 2048 * 1024
    expected = {
        "hf": 6 * (PIN_N - PIN_E),
        "megatron": 6 * (PIN_N - PIN_E) + 6 * lds,
        "titan": 6 * (PIN_N - PIN_E) + 12 * lds,
        "embeddings": 6 * PIN_N + 12 * lds,
    }
    for convention, value in expected.items():
        derivation = flops_per_token(GPT2_PIN_CONFIG, convention=convention, seq_len=1024)
        assert not isinstance(derivation, dict)
        assert derivation.value == value
        assert derivation.unit == "FLOP/token"
        assert derivation.name == f"flops_per_token.{convention}"


def test_module_fields_record_counted_and_detected_provenance() -> None:
    shape = shape_from_module(pin_model())
    assert shape.source_of("n_params").provenance == "counted"
    assert shape.source_of("n_embedding_params").provenance == "counted"
    assert "wte" in shape.source_of("n_embedding_params").source
    layers = shape.source_of("layers")
    assert layers.provenance == "detected" and layers.source == "h: 18 x Block"
    assert shape.heads == 16
    assert shape.tied_embeddings is False
    assert shape.learned_positions == 1024
    assert shape.source_of("seq_len").provenance == "assumed"


def test_config_fields_record_keys_as_sources() -> None:
    shape = shape_from_config(GPT2_PIN_CONFIG)
    assert shape.source_of("layers").source == "config.n_layer"
    assert shape.source_of("d_model").source == "config.n_embd"
    assert shape.source_of("ffn_width").source.startswith("config.n_inner is None")
    assert shape.ffn_width == 4 * 2048 and shape.ffn_kind == "mlp"
    assert shape.source_of("seq_len").provenance == "assumed"
    assert shape.source_of("n_params").provenance == "detected"


def test_seq_len_argument_is_declared_in_the_derivation() -> None:
    derivation = flops_per_token(GPT2_PIN_CONFIG, convention="titan", seq_len=512)
    assert not isinstance(derivation, dict)
    s_input = next(i for i in derivation.inputs if i.name == "S")
    assert (s_input.value, s_input.provenance) == (512, "declared")


def test_tied_head_stays_in_n_minus_e_and_leaves_hf_unchanged() -> None:
    with torch.device("meta"):
        tied = GPT(32000, 1024, 2048, 18, 16, tied=True)
    shape = shape_from_module(tied)
    assert shape.tied_embeddings is True
    assert shape.n_params == PIN_N - 32000 * 2048
    assert shape.n_embedding_params == 1024 * 2048
    hf = flops_per_token(tied, convention="hf", seq_len=1024)
    assert not isinstance(hf, dict) and giga(hf.value) == 5.83


def test_nanochat_alias_means_titan_and_unknown_names_list_valid_ones() -> None:
    assert validate_convention("nanochat") == "titan"
    assert validate_convention(" MEGATRON ") == "megatron"
    a = flops_per_token(GPT2_PIN_CONFIG, convention="nanochat", seq_len=1024)
    b = flops_per_token(GPT2_PIN_CONFIG, convention="titan", seq_len=1024)
    assert not isinstance(a, dict) and not isinstance(b, dict) and a.value == b.value
    with pytest.raises(ValueError, match="'foo'.*hf, megatron, titan, embeddings"):
        validate_convention("foo")
    with pytest.raises(ValueError, match="'foo'"):
        flops_per_token(GPT2_PIN_CONFIG, convention="foo")


def test_missing_layers_withholds_attention_conventions_and_names_flags() -> None:
    shape = ModelShape(n_params=1000, n_embedding_params=100)
    derivations = flops_per_token(shape)
    assert isinstance(derivations, dict)
    assert derivations["hf"].value == 6 * 900
    for convention in ("megatron", "titan", "embeddings"):
        assert derivations[convention].value is None
        assert "--layers N" in derivations[convention].missing
        assert "--seq-len S" in derivations[convention].missing
    assert flops_range(derivations) == (5400.0, 5400.0)


def test_override_shape_declares_fields_and_rejects_bad_values() -> None:
    shape = override_shape(shape_from_config(GPT2_PIN_CONFIG), layers=12, seq_len="256")
    assert shape.layers == 12 and shape.seq_len == 256
    assert shape.source_of("layers").provenance == "declared"
    assert shape.source_of("layers").source == "--layers 12"
    with pytest.raises(ValueError, match="--d-model.*-5"):
        override_shape(shape, d_model=-5)
    with pytest.raises(ValueError, match="--seq-len.*'abc'"):
        override_shape(shape, seq_len="abc")


def test_flops_range_spans_conventions() -> None:
    derivations = flops_per_token(GPT2_PIN_CONFIG, seq_len=1024)
    assert isinstance(derivations, dict) and tuple(derivations) == CONVENTIONS
    low, high = flops_range(derivations)
    assert (giga(low), giga(high)) == (5.83, 6.69)


def test_gpt2_small_config_counts_124m_with_tied_head() -> None:
    shape = shape_from_config(
        {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12}
    )
    assert shape.tied_embeddings is True and shape.source_of("tied_embeddings").provenance == "assumed"
    assert shape.n_params == 124_439_808
    assert shape.n_embedding_params == 1024 * 768


@pytest.mark.parametrize(
    ("config", "n_params"),
    [
        (
            {
                "model_type": "llama",
                "vocab_size": 32000,
                "hidden_size": 4096,
                "intermediate_size": 11008,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "tie_word_embeddings": False,
            },
            6_738_415_616,
        ),
        (
            {
                "model_type": "llama",
                "vocab_size": 128256,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "tie_word_embeddings": False,
            },
            8_030_261_248,
        ),
        (
            {
                "model_type": "qwen2",
                "vocab_size": 151936,
                "hidden_size": 896,
                "intermediate_size": 4864,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "tie_word_embeddings": True,
            },
            494_032_768,
        ),
    ],
    ids=["llama2-7b", "llama3-8b", "qwen2-0.5b"],
)
def test_llama_style_configs_count_published_parameter_totals(config: dict, n_params: int) -> None:
    shape = shape_from_config(config)
    assert shape.n_params == n_params
    assert shape.ffn_kind == "gated"
    assert shape.learned_positions == 0


MIXTRAL = {
    "model_type": "mixtral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
}


def test_moe_config_counts_active_parameters_and_flops_use_them() -> None:
    shape = shape_from_config(MIXTRAL)
    assert shape.n_params == 46_702_792_704
    assert shape.n_active_params == 12_879_925_248
    hf = flops_per_token(shape, convention="hf")
    assert not isinstance(hf, dict)
    assert hf.value == 6 * (12_879_925_248 - 32000 * 4096)
    assert hf.formula == "6 * (N_active - E)"


def test_moe_without_top_k_withholds_flops_and_says_why() -> None:
    config = {k: v for k, v in MIXTRAL.items() if k != "num_experts_per_tok"}
    hf = flops_per_token(config, convention="hf")
    assert not isinstance(hf, dict) and hf.value is None
    assert "mixture-of-experts" in hf.missing


class Expert(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)


class MoEBlock(nn.Module):
    def __init__(self, d: int, experts: int) -> None:
        super().__init__()
        self.top_k = 2
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(Expert(d) for _ in range(experts))


class MoEModel(nn.Module):
    def __init__(self, d: int = 8, experts: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, d)
        self.layers = nn.ModuleList(MoEBlock(d, experts) for _ in range(layers))
        self.head = nn.Linear(d, 50, bias=False)


def test_moe_module_counts_top_k_experts_as_active() -> None:
    with torch.device("meta"):
        model = MoEModel()
    shape = shape_from_module(model)
    per_expert = 2 * 8 * 16
    assert shape.moe_experts == 4 and shape.moe_top_k == 2 and shape.layers == 3
    assert shape.n_active_params == shape.n_params - 3 * 2 * per_expert
    assert shape.source_of("n_active_params").provenance == "counted"


def test_module_config_attribute_wins_for_structure_and_counts_stay_counted() -> None:
    model = pin_model()
    model.config = SimpleNamespace(**{**GPT2_PIN_CONFIG, "n_layer": 18, "n_positions": 2048})
    shape = shape_from_module(model)
    assert shape.source_of("layers").source == "config.n_layer"
    assert shape.seq_len == 2048
    assert shape.n_params == PIN_N and shape.source_of("n_params").provenance == "counted"


def test_frozen_parameters_stay_in_n_and_enter_only_the_weight_gradient_term() -> None:
    model = GPT(16, 8, 4, 2, 2)
    total = sum(p.numel() for p in model.parameters())
    full = flops_per_token(shape_from_module(model), "hf")
    for p in model.wte.parameters():
        p.requires_grad_(False)
    shape = shape_from_module(model)
    assert shape.n_params == total and shape.n_embedding_params == 16 * 4 + 8 * 4
    assert shape.n_trained_params == total - 16 * 4 and shape.n_trained_embedding_params == 8 * 4
    assert shape.frozen and shape.source_of("n_trained_params").provenance == "counted"
    frozen = flops_per_token(shape, "hf")
    assert frozen.formula == "2 * (N - E) + 2 * (N_b - E_b) + 2 * (N_t - E_t)"
    # the frozen table is a lookup: no matmul, so the figure equals full training's
    assert frozen.value == full.value == 6 * (total - 16 * 4 - 8 * 4)


def test_a_frozen_backbone_with_a_trained_head_counts_weight_gradients_of_the_head_only() -> None:
    model = GPT(16, 8, 4, 2, 2)
    for p in model.parameters():
        p.requires_grad_(False)
    model.lm_head.weight.requires_grad_(True)
    shape = shape_from_module(model)
    head = model.lm_head.weight.numel()
    n, e = shape.n_params, shape.n_embedding_params
    # the head is the first trained module: no module after it, so no activation gradient at all
    assert (shape.n_trained_params, shape.n_backward_params, shape.backward_layers) == (head, 0, 0)
    hf = flops_per_token(shape, "hf")
    assert hf.value == 2 * (n - e) + 2 * head
    titan = flops_per_token(shape, "titan", seq_len=8)
    assert titan.value == hf.value + 4 * 2 * 4 * 8  # forward attention only: 4 L d S, no layer on the backward path
    names = {i.name for i in titan.inputs}
    assert {"N", "E", "N_b", "E_b", "N_t", "E_t", "L", "L_b", "d", "S"} <= names


def test_full_training_keeps_the_six_n_formulas() -> None:
    shape = shape_from_module(GPT(16, 8, 4, 2, 2))
    assert not shape.frozen and shape.n_trained_params is None
    for convention, formula in FORMULAS.items():
        assert flops_per_token(shape, convention, seq_len=8).formula == formula


def test_importing_pure_modules_does_not_import_torch() -> None:
    code = (
        "import sys, trainmeter.compute.flops, trainmeter.compute.peaks, trainmeter.compute.mfu, trainmeter.compute.flop_count; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[2] / "src")},
    )
    assert out.stdout.strip() == "False"


def test_a_frozen_mixture_of_experts_scales_the_trained_and_backward_counts_to_the_active_share() -> None:
    shape = ModelShape(n_params=1000, n_active_params=400, n_embedding_params=100, moe_experts=8, moe_top_k=2,
                       n_trained_params=200, n_trained_embedding_params=0, n_backward_params=500,
                       n_backward_embedding_params=0)
    d = flops_per_token(shape, "hf")
    inputs = {i.name: i for i in d.inputs}
    assert d.formula.startswith("2 * (N_active - E) + 2 * (N_b - E_b)")
    assert inputs["N_t"].value == 80 and inputs["N_b"].value == 200 and inputs["N_t"].provenance == "assumed"
    assert d.value == 2 * (400 - 100) + 2 * 200 + 2 * 80


def test_a_conventions_flops_spent_is_badged_detected_never_counted_though_its_parameters_are_counted():
    from trainmeter.compute.flops import flops_input
    from trainmeter.compute.mfu import flops_spent
    from trainmeter.core.provenance import Derivation, Input
    from trainmeter.widget.view_model import badge_tiles

    hf = Derivation(name="flops_per_token.hf", formula="6 * (N - E)", value=6000.0, unit="FLOP/token",
                    inputs=(Input(name="N", value=1100, unit="params", provenance="counted"),
                            Input(name="E", value=100, unit="params", provenance="counted")))
    f = flops_input("hf", hf)
    assert (f.value, f.provenance) == (6000.0, "detected") and f.source == "flops_per_token.hf = 6 * (N - E)"
    spent = flops_spent(f, 10).to_dict()
    (tile,) = badge_tiles([{"id": "flops", "label": "FLOPs spent (hf)", "value": spent["value"], "derivation": spent}])
    assert tile["provenance"] == "detected"  # FlopCounterMode's figure alone is "counted"


def test_mfu_conventions_is_the_one_rule_for_a_run_and_a_launch():
    from trainmeter.compute.flops import COUNTED, MFU_ORDER, mfu_conventions, with_counted

    assert MFU_ORDER == ("hf", "megatron", "titan", "embeddings", COUNTED)
    assert with_counted({"hf": 1}, None) == {"hf": 1} and with_counted({"hf": 1}, 2) == {"hf": 1, "counted": 2}
    assert mfu_conventions(["counted", "titan", "hf", "other"]) == ["hf", "titan", "counted", "other"]
    assert mfu_conventions(["counted", "titan", "hf"], "megatron") == ["megatron", "counted"]
    assert mfu_conventions(["titan"], "hf") == ["hf"]


def test_flops_input_badges_counted_flops_counted_and_a_conventions_detected():
    from trainmeter.compute.flops import flops_input

    assert flops_input("counted", 5.0, source="s").provenance == "counted"
    assert flops_input("hf", 5.0, source="s").provenance == "detected"
    assert flops_input("hf", 5.0, "samples", source="s").unit == "FLOP/sample"
