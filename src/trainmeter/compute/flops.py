"""Training FLOPs per token under named conventions, with the inputs' provenance (docs/spec.md section 5).

The symbols, :data:`FORMULAS` and, with frozen parameters, :data:`FROZEN_FORMULAS`: spec section 5.
:func:`mfu_conventions` and :func:`flops_input` are the one rule for which F (a convention's, or :data:`COUNTED`) a
run or a launch derives MFU under. Never imports torch at module level. Pure and thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from trainmeter.compute.model_shape import ModelShape, override_shape, shape_from_config
from trainmeter.compute.shape_module import shape_from_module
from trainmeter.core.provenance import Derivation, Input, as_input, weakest

CONVENTIONS: tuple[str, ...] = ("hf", "megatron", "titan", "embeddings")
"""The analytic conventions, in increasing order of FLOPs for a usual decoder."""

COUNTED = "counted"  # F counted by one real step under FlopCounterMode, named beside the conventions wherever F is
MFU_ORDER: tuple[str, ...] = (*CONVENTIONS, COUNTED)  # the order MFU, FLOPs spent and required list their F
CONVENTION_ALIASES: dict[str, str] = {"nanochat": "titan", "torchtitan": "titan", "all_params": "embeddings"}
FORMULAS: dict[str, str] = {"hf": "6 * (N - E)", "megatron": "6 * (N - E) + 6 * L * d * S",
                            "titan": "6 * (N - E) + 12 * L * d * S", "embeddings": "6 * N + 12 * L * d * S"}
FROZEN_FORMULAS: dict[str, str] = {
    "hf": "2 * (N - E) + 2 * (N_b - E_b) + 2 * (N_t - E_t)",
    "megatron": "2 * (N - E) + 2 * (N_b - E_b) + 2 * (N_t - E_t) + 2 * L * d * S + 4 * L_b * d * S",
    "titan": "2 * (N - E) + 2 * (N_b - E_b) + 2 * (N_t - E_t) + 4 * L * d * S + 8 * L_b * d * S",
    "embeddings": "2 * N + 2 * N_b + 2 * N_t + 4 * L * d * S + 8 * L_b * d * S",
}
"""The conventions with frozen parameters (docs/spec.md section 5, "Frozen weights"): :data:`FORMULAS` when all is
trained."""
_ATTENTION_FACTOR = {"hf": 0, "megatron": 6, "titan": 12, "embeddings": 12}


def validate_convention(name: str) -> str:
    """The canonical convention for ``name`` (case-insensitive, aliases resolved); ``ValueError`` listing the valid."""
    key = CONVENTION_ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key in CONVENTIONS:
        return key
    aliases = ", ".join(f"{a} (= {c})" for a, c in CONVENTION_ALIASES.items())
    raise ValueError(f"unknown FLOPs convention {name!r}; valid: {', '.join(CONVENTIONS)}; aliases: {aliases}")


def as_shape(model_or_shape: Any) -> ModelShape:
    """A :class:`ModelShape` for a shape, a ``torch.nn.Module`` or a Hugging Face style config (else ``TypeError``)."""
    if isinstance(model_or_shape, ModelShape):
        return model_or_shape
    if hasattr(model_or_shape, "named_parameters") and hasattr(model_or_shape, "modules"):
        return shape_from_module(model_or_shape)
    if isinstance(model_or_shape, Mapping) or hasattr(model_or_shape, "to_dict") or hasattr(model_or_shape, "__dict__"):
        return shape_from_config(model_or_shape)
    raise TypeError(f"expected a ModelShape, a torch.nn.Module or a config, got {type(model_or_shape).__name__}")


def _missing_text(shape: ModelShape, symbols: list[str]) -> str:
    """Name what would enable a derivation whose ``symbols`` are unknown."""
    flags = " ".join(flag for sym, flag in (("L", "--layers N"), ("d", "--d-model D"), ("S", "--seq-len S"))
                     if sym in symbols)
    n_text = ("active parameters of this mixture-of-experts model unknown (top-k experts not read)" if shape.is_moe
              else "parameter count N unknown (pass the model, or a config of a known layout)")
    text = (n_text if "N" in symbols or "N_active" in symbols else "",
            "embedding parameter count E unknown" if "E" in symbols else "", f"declare {flags}" if flags else "")
    return "; ".join(t for t in text if t)


def _frozen_inputs(shape: ModelShape, n_symbol: str, convention: str) -> list[Input]:
    """The trained and backward-path inputs of a frozen model (MoE: scaled to the active share, assumed)."""
    names = (("n_backward_params", "N_b"), ("n_backward_embedding_params", "E_b"), ("n_trained_params", "N_t"),
             ("n_trained_embedding_params", "E_t"))  # the embeddings convention has no E terms
    inputs = [shape.as_input(f, sym, "params") for f, sym in names if convention != "embeddings" or sym[0] == "N"]
    if shape.is_moe and n_symbol == "N_active" and shape.n_params and shape.n_active_params:
        share = shape.n_active_params / shape.n_params
        inputs = [i if i.value is None or i.name.startswith("E") else
                  replace(i, value=int(round(i.value * share)), provenance="assumed",  # type: ignore[operator]
                          source=f"{i.source}, x {share:.4g} (the active share of N)") for i in inputs]
    return inputs


def _derive(shape: ModelShape, convention: str) -> Derivation:
    moe, frozen = shape.is_moe, shape.frozen
    n_symbol = "N_active" if moe else "N"
    dense_active = shape.n_params is None and shape.n_active_params is not None  # N read only as the active count
    n_field = "n_active_params" if moe or dense_active else "n_params"
    table = FROZEN_FORMULAS if frozen else FORMULAS
    formula = re.sub(r"\bN\b", n_symbol, table[convention]) if moe else table[convention]  # N_b, N_t keep theirs
    inputs = [shape.as_input(n_field, n_symbol, "params")]
    if convention != "embeddings":
        inputs.append(shape.as_input("n_embedding_params", "E", "params"))
    if frozen:
        inputs += _frozen_inputs(shape, n_symbol, convention)
    factor = _ATTENTION_FACTOR[convention]
    if factor:
        inputs += [shape.as_input("layers", "L", "1"), shape.as_input("d_model", "d", "1"),
                   shape.as_input("seq_len", "S", "tokens")]
        if frozen:
            layers_b = shape.as_input("backward_layers", "L_b", "1")
            if layers_b.value is None and shape.layers is not None:  # no repeated blocks read: all of L
                layers_b = Input(name="L_b", value=shape.layers, unit="1", provenance="assumed",
                                 source="no repeated blocks read: every layer on the backward's path")
            inputs.append(layers_b)
    missing = [i.name for i in inputs if i.value is None]
    name = f"flops_per_token.{convention}"
    if missing:
        return Derivation(name=name, formula=formula, value=None, unit="FLOP/token", inputs=tuple(inputs),
                          missing=_missing_text(shape, missing))
    # S may be a token-weighted mean (a float); counts are whole
    values: dict[str, Any] = {i.name: float(i.value) if i.name == "S" else int(i.value)  # type: ignore[arg-type]
                              for i in inputs}
    # one sum for both tables: with all trained, N_b = N_t = N, E_b = E_t = E and L_b = L (embeddings: E = 0)
    n, e = values[n_symbol], values.get("E", 0)
    n_b, e_b, n_t, e_t = values.get("N_b", n), values.get("E_b", e), values.get("N_t", n), values.get("E_t", e)
    dense = 2 * (n - e) + 2 * (n_b - e_b) + 2 * (n_t - e_t)
    l_b = values.get("L_b", values.get("L"))
    attention = factor // 3 * (values["L"] + 2 * l_b) * values["d"] * values["S"] if factor else 0
    return Derivation(name=name, formula=formula, value=float(dense + attention), unit="FLOP/token",
                      inputs=tuple(inputs))


def flops_per_token(model_or_shape: Any, convention: str | None = None,
                    seq_len: int | None = None) -> Derivation | dict[str, Derivation]:
    """Training FLOPs per token of a model, shape or config (:func:`as_shape`) under ``convention`` (an alias too):
    the Derivation ``flops_per_token.<convention>``, or with ``None`` a dict of every one; ``seq_len``: S declared."""
    canonical = None if convention is None else validate_convention(convention)
    shape = as_shape(model_or_shape)
    if seq_len is not None:
        shape = override_shape(shape, seq_len=seq_len)
        shape = shape.with_value("seq_len", shape.seq_len, "declared", f"seq_len={shape.seq_len}")
    return {c: _derive(shape, c) for c in CONVENTIONS} if canonical is None else _derive(shape, canonical)


def flops_range(derivations: Mapping[str, Derivation]) -> tuple[float, float] | None:
    values = [d.value for d in derivations.values() if d.value is not None]
    return (min(values), max(values)) if values else None


def flops_input(convention: str, f: Derivation | float | None, unit: str = "tokens", source: str = "") -> Input:
    """F under ``convention`` as the input of MFU, FLOPs spent and required, for a run or a launch: :data:`COUNTED`
    F is ``counted`` (or its derivation's weakest), a convention's at most ``detected`` (a model of the work, never
    badged ``counted``: docs/spec.md section 5); ``source``: a number's origin."""
    inp = as_input("F", f, f"FLOP/{unit[:-1]}", "counted" if convention == COUNTED else "detected", source)
    if convention == COUNTED:
        return inp
    return replace(inp, provenance=weakest((inp.provenance, "detected")) or "detected")  # type: ignore[arg-type]


_F = TypeVar("_F")


def with_counted(flops: Mapping[str, _F], counted: _F | None) -> dict[str, _F]:
    """Every F a run has, by convention: the conventions' (``flops``), then :data:`COUNTED` when it was counted."""
    return {**flops, COUNTED: counted} if counted is not None else dict(flops)


def mfu_conventions(names: Iterable[str], convention: str | None = None) -> list[str]:
    """The conventions MFU is derived under, given the ``names`` some F is known for, in :data:`MFU_ORDER` (others
    last, sorted): with ``convention`` named, that one (known or not) and :data:`COUNTED` when known; else all known."""
    known = set(names)
    if convention is not None:
        known = {convention} | (known & {COUNTED})
    return [c for c in MFU_ORDER if c in known] + sorted(known - set(MFU_ORDER))
