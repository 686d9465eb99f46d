"""The model's shape as FLOPs formulas need it, each field with its provenance and source. Pure; never imports torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal

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
        n = self.n_params
        return n is not None and self.n_trained_params is not None and self.n_trained_params < n

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
        """Return field ``name`` as a derivation :class:`Input` named ``symbol``."""
        value = getattr(self, name)
        found = self.source_of(name)
        if found is None:
            return Input(name=symbol, value=None, unit=unit, provenance="assumed", source=f"{name} unknown")
        return Input(name=symbol, value=value, unit=unit, provenance=found.provenance, source=found.source)

    def with_value(self, name: str, value: object, provenance: Provenance, source: str) -> ModelShape:
        """A copy with field ``name`` set to ``value`` and its source recorded (``ValueError``: not a field)."""
        if name not in SHAPE_FIELDS:
            raise ValueError(f"unknown ModelShape field {name!r}; valid: {', '.join(SHAPE_FIELDS)}")
        sources = dict(self.sources)
        if value is None:
            sources.pop(name, None)
        else:
            sources[name] = FieldSource(provenance=provenance, source=source)
        return replace(self, **{name: value, "sources": sources})

    def merged_under(self, base: ModelShape, names: tuple[str, ...] | None = None) -> ModelShape:
        """Return ``base`` with every field (of ``names``, default all) this shape knows set from it (with its source)."""
        out = base
        for name in names or SHAPE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                found = self.source_of(name)
                assert found is not None
                out = out.with_value(name, value, found.provenance, found.source)
        return out


SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelShape) if f.name != "sources")
"""Names of the value fields of :class:`ModelShape`, in declaration order."""

OVERRIDE_FLAGS: dict[str, str] = {"layers": "--layers", "d_model": "--d-model", "seq_len": "--seq-len", "vocab": "--vocab"}
"""Fields a user may declare, and the flag that declares each."""


def _positive_int(name: str, value: object) -> int:
    """Return ``value`` as a positive int or raise ValueError naming it."""
    bad = ValueError(f"{OVERRIDE_FLAGS.get(name, name)} must be a positive integer, got {value!r}")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise bad from None
    if isinstance(value, bool) or number <= 0 or (
            number != value and not (isinstance(value, str) and value.strip().isdigit())):
        raise bad
    return number


def override_shape(shape: ModelShape, *, layers: int | None = None, d_model: int | None = None,
                   seq_len: int | None = None, vocab: int | None = None) -> ModelShape:
    """``shape`` with the given fields (``None``: keep the detected one) declared by the user: provenance
    ``declared``, the flag as source. ``ValueError`` naming the flag for a value that is not a positive integer."""
    out = shape
    for name, value in (("layers", layers), ("d_model", d_model), ("seq_len", seq_len), ("vocab", vocab)):
        if value is None:
            continue
        number = _positive_int(name, value)
        out = out.with_value(name, number, "declared", f"{OVERRIDE_FLAGS[name]} {number}")
    return out
