"""The model's shape as FLOPs formulas need it, each field with its provenance and source, and its read from a
Hugging Face style config (dict, ``to_dict()``, attributes): GPT-2 and Llama key spellings; N, E and a MoE's active
count computed for the GPT-2 and Llama layouts (Mistral, Mixtral, Qwen2, Qwen3 too). Pure; never imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from trainmeter.core.provenance import Input, Provenance

FfnKind = Literal["mlp", "gated"]
"""``mlp``: two matrices (up, down), e.g. GPT-2's 4d GELU MLP; ``gated``: three (gate, up, down), e.g. SwiGLU."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldSource:
    """Where one field of a :class:`ModelShape` came from: its provenance and source (``"config.n_layer"``)."""

    provenance: Provenance
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    """Shape of a (transformer) model, every field optional (``None``: nobody could read it): L, d, S, V, N, E, N_t,
    E_t, N_b, E_b, L_b and the MoE fields are the symbols of docs/spec.md section 5; ``sources``: field name ->
    :class:`FieldSource` (a field set without one reads as declared)."""

    layers: int | None = None
    d_model: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn_width: int | None = None
    ffn_kind: FfnKind | None = None
    vocab: int | None = None
    tied_embeddings: bool | None = None
    learned_positions: int | None = None
    seq_len: int | None = None
    n_params: int | None = None
    n_embedding_params: int | None = None
    moe_experts: int | None = None
    moe_top_k: int | None = None
    moe_shared_experts: int | None = None
    n_active_params: int | None = None
    n_trained_params: int | None = None
    n_trained_embedding_params: int | None = None
    n_backward_params: int | None = None
    n_backward_embedding_params: int | None = None
    backward_layers: int | None = None
    sources: Mapping[str, FieldSource] = field(default_factory=dict, hash=False)

    @property
    def frozen(self) -> bool:
        """True when part of the model is known to be frozen (fewer trained parameters than N)."""
        return self.n_params is not None and self.n_trained_params is not None and self.n_trained_params < self.n_params

    @property
    def is_moe(self) -> bool:
        """True when the model routes tokens to more than one expert per layer."""
        return (self.moe_experts or 0) > 1

    def source_of(self, name: str) -> FieldSource | None:
        """Return the :class:`FieldSource` of field ``name`` (declared when unrecorded), or ``None`` when unset."""
        if getattr(self, name) is None:
            return None
        return self.sources.get(name) or FieldSource(provenance="declared", source="ModelShape")

    def as_input(self, name: str, symbol: str, unit: str = "1") -> Input:
        src = self.source_of(name) or FieldSource(provenance="assumed", source=f"{name} unknown")
        return Input(name=symbol, value=getattr(self, name), unit=unit, provenance=src.provenance, source=src.source)

    def with_value(self, name: str, value: object, provenance: Provenance, source: str) -> ModelShape:
        sources = dict(self.sources)
        if value is None:
            sources.pop(name, None)
        else:
            sources[name] = FieldSource(provenance=provenance, source=source)
        return replace(self, **{name: value, "sources": sources})

    def merged_under(self, base: ModelShape, names: tuple[str, ...] | None = None) -> ModelShape:
        """``base`` with every field (of ``names``, default all) this shape knows set from it, with its source."""
        out = base
        for name in names or SHAPE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                found = self.source_of(name)
                out = out.with_value(name, value, found.provenance, found.source)
        return out


SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelShape) if f.name != "sources")
"""Names of the value fields of :class:`ModelShape`, in declaration order."""

OVERRIDE_FLAGS: dict[str, str] = {"layers": "--layers", "d_model": "--d-model", "seq_len": "--seq-len", "vocab": "--vocab"}
"""Fields a user may declare, and the flag that declares each."""


def override_shape(shape: ModelShape, *, layers: int | None = None, d_model: int | None = None,
                   seq_len: int | None = None, vocab: int | None = None) -> ModelShape:
    """``shape`` with the given fields (``None``: keep the detected one) declared by the user: provenance
    ``declared``, the flag as source. ``ValueError`` naming the flag for a value that is not a positive integer (a
    digit string reads as one)."""
    for name, value in (("layers", layers), ("d_model", d_model), ("seq_len", seq_len), ("vocab", vocab)):
        number = _as_int(int(value) if isinstance(value, str) and value.strip().isdigit() else value)
        if value is not None and number is None:
            raise ValueError(f"{OVERRIDE_FLAGS[name]} must be a positive integer, got {value!r}")
        if number is not None:
            shape = shape.with_value(name, number, "declared", f"{OVERRIDE_FLAGS[name]} {number}")
    return shape


_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "d_model": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "ffn_width": ("moe_intermediate_size", "intermediate_size", "n_inner", "ffn_dim", "d_ff"),
    "vocab": ("vocab_size", "n_vocab", "padded_vocab_size"),
    "positions": ("n_positions", "max_position_embeddings", "n_ctx", "seq_length", "max_seq_len"),
    "moe_experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "moe_top_k": ("num_experts_per_tok", "moe_top_k", "num_experts_per_token"),
    "moe_shared_experts": ("n_shared_experts", "num_shared_experts"),
}
# ``top_k`` is deliberately absent: older PretrainedConfig carries a generation ``top_k`` (50).

FAMILIES = frozenset({"gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3"})  # GPT-2's layout, then Llama's


def config_to_dict(config: Any) -> dict[str, Any]:
    """Return ``config`` as a plain dict (dict, ``to_dict()`` or attributes); ``{}`` when unreadable."""
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        with contextlib.suppress(Exception):  # a broken config reads as empty, never raises
            out = to_dict()
            if isinstance(out, Mapping):
                return dict(out)
    try:
        return {k: v for k, v in vars(config).items() if not k.startswith("_")}
    except TypeError:  # None, or an object without attributes
        return {}


def _read(cfg: Mapping[str, Any], field: str) -> tuple[int, str] | None:
    """(value, "config.KEY") of the first key of ``field`` present with a non-None value, if a positive int."""
    for key in _KEYS[field]:
        value = cfg.get(key)
        if value is not None and not isinstance(value, (dict, list)):
            value = _as_int(value)
            return None if value is None else (value, f"config.{key}")
    return None


def _as_int(value: Any) -> int | None:
    """Return ``value`` as int when it is a whole positive number, else ``None``."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if not isinstance(value, bool) and number > 0 and number == value else None


def _family(cfg: Mapping[str, Any]) -> tuple[str | None, Provenance]:
    """Return the parameter layout (``"gpt2"``/``"llama"``/None) and how sure we are."""
    model_type = str(cfg.get("model_type") or "").lower()
    if model_type in FAMILIES:
        return model_type, "detected"
    if model_type:
        return None, "assumed"
    if "n_embd" in cfg and "n_layer" in cfg:
        return "gpt2", "assumed"
    if "num_key_value_heads" in cfg and "intermediate_size" in cfg and "rms_norm_eps" in cfg:
        return "llama", "assumed"
    return None, "assumed"


def _gpt2_counts(s: ModelShape) -> tuple[int, int, int] | None:
    """(N, E, N_active) of a GPT-2 layout: LayerNorm weight+bias, biased linears, learned positions."""
    L, d, f, V, P = s.layers, s.d_model, s.ffn_width, s.vocab, s.learned_positions
    if None in (L, d, f, V, P):
        return None
    block = (2 * 2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    head = 0 if s.tied_embeddings else V * d
    n = L * block + V * d + P * d + 2 * d + head  # blocks, token and position tables, final norm, untied head
    return n, P * d + head, n


def _llama_counts(s: ModelShape, family: str, cfg: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(N, E, N_active) of a Llama layout: RMSNorm weights, bias-free GQA attention, gated MLP, rotary positions."""
    L, d, H, KV, hd, f, V = s.layers, s.d_model, s.heads, s.kv_heads, s.head_dim, s.ffn_width, s.vocab
    if None in (L, d, H, KV, hd, f, V):
        return None
    attn = d * H * hd + 2 * d * KV * hd + H * hd * d
    if family in ("qwen2",):
        attn += H * hd + 2 * KV * hd  # q, k, v biases
    elif cfg.get("attention_bias"):
        attn += H * hd + 2 * KV * hd + d
    if family == "qwen3":
        attn += 2 * hd  # q_norm, k_norm
    mlp_one = (3 if s.ffn_kind != "mlp" else 2) * d * f
    if cfg.get("mlp_bias"):
        mlp_one += (2 * f + d) if s.ffn_kind != "mlp" else (f + d)
    experts: int = s.moe_experts if s.is_moe else 1  # type: ignore[assignment]
    top_k = s.moe_top_k if s.is_moe else 1
    if top_k is None:
        return None
    # a block: attention, shared experts, the router, two norms, then its experts (all of them, or the top k active)
    common = attn + (s.moe_shared_experts or 0) * mlp_one + (d * experts if s.is_moe else 0) + 2 * d
    head = 0 if s.tied_embeddings else V * d  # untied: a head of its own, and the token table is lookup-only (E)
    rest = V * d + head + d
    return L * (common + experts * mlp_one) + rest, head, L * (common + top_k * mlp_one) + rest


def shape_from_config(config: Any) -> ModelShape:
    """Read a :class:`ModelShape` from a config (a dict, a ``PretrainedConfig``-like object, or ``None``); never raises.
    Keys read are ``detected`` (the key as source); a GPT-2 config without ``n_inner`` gets ffn width 4d, one without
    kv heads ``kv_heads = heads`` (assumed); S is the context length, ``assumed``; N and E are analytic for the GPT-2 and
    Llama layouts (``detected`` when ``model_type`` names the family, ``assumed`` from the key spelling alone)."""
    cfg = config_to_dict(config)
    shape = ModelShape()
    for name in (key for key in _KEYS if key != "positions"):  # the context length is S, assumed: below
        found = _read(cfg, name)
        if found is not None:
            shape = shape.with_value(name, found[0], "detected", found[1])
    tied = cfg.get("tie_word_embeddings")
    family, family_prov = _family(cfg)
    if tied is not None and not isinstance(tied, (dict, list)):
        shape = shape.with_value("tied_embeddings", bool(tied), "detected", "config.tie_word_embeddings")
    elif family is not None:
        # transformers' PretrainedConfig defaults tie_word_embeddings to True; LlamaConfig to False.
        shape = shape.with_value("tied_embeddings", family == "gpt2", "assumed", f"{family} config default")
    if shape.heads and shape.kv_heads is None:
        shape = shape.with_value("kv_heads", shape.heads, "assumed", "no kv heads key: full multi-head attention")
    if shape.heads and shape.d_model and shape.head_dim is None and shape.d_model % shape.heads == 0:
        shape = shape.with_value("head_dim", shape.d_model // shape.heads, "detected", "d_model / heads")
    if shape.ffn_width is None and family == "gpt2" and shape.d_model:
        shape = shape.with_value("ffn_width", 4 * shape.d_model, "detected", "config.n_inner is None: 4 * d_model")
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or "").lower()
    if family == "gpt2":
        shape = shape.with_value("ffn_kind", "mlp", family_prov, "GPT-2 layout: 2-matrix MLP")
    elif family is not None:
        shape = shape.with_value("ffn_kind", "gated", family_prov, f"{family} layout: gated MLP ({act or 'silu'})")
    elif "glu" in act:
        shape = shape.with_value("ffn_kind", "gated", "detected", f"hidden_act {act!r}")
    pos = _read(cfg, "positions")
    if pos is not None:
        shape = shape.with_value("seq_len", pos[0], "assumed",
                                 f"{pos[1]} (context length; the batch's sequence length replaces it)")
        if family == "gpt2":
            shape = shape.with_value("learned_positions", pos[0], family_prov, f"{pos[1]}: learned position table")
    if family is not None and family != "gpt2":
        shape = shape.with_value("learned_positions", 0, family_prov, f"{family} layout: rotary positions")
    counts = _gpt2_counts(shape) if family == "gpt2" else _llama_counts(shape, family, cfg) if family else None
    if counts is not None:
        src = f"analytic {'GPT-2' if family == 'gpt2' else family} parameter count from the config"
        notes = ("", " (lookup-only tables)", " (top-k experts)" if shape.is_moe else "")
        for name, value, note in zip(("n_params", "n_embedding_params", "n_active_params"), counts, notes, strict=True):
            shape = shape.with_value(name, value, family_prov, src + note)
    return shape
