"""MFU, FLOPs spent and required, progress and ETA: pure functions returning Derivations.

Every quantity argument accepts a plain number, an :class:`~trainmeter.core.provenance.Input`
(keeps its provenance), a :class:`~trainmeter.core.provenance.Derivation` (its value,
with the weakest provenance of its inputs) or ``None`` (missing: the result's
value is ``None`` and ``missing`` says what would enable it). Plain numbers get
the provenance the caller names (defaults below). No clock is read here: pass
paces and counts. Never imports torch. All functions are pure and thread-safe.
"""

from __future__ import annotations

import math
from typing import Literal

from trainmeter.compute.peaks import PeakRow, normalize_dtype, validate_peak
from trainmeter.core.provenance import Derivation, Input, Provenance

Quantity = int | float | Input | Derivation | None
"""A number, an Input, a Derivation, or None when missing."""

Pace = Literal["training-only", "session"]
PACES: tuple[str, ...] = ("training-only", "session")
"""``training-only``: tokens/s over time spent in training steps; ``session``: over the whole wall clock."""

PEAK_FLAGS = "--peak-tflops X --peak-source TEXT"

_WEAKEST_FIRST: tuple[Provenance, ...] = ("assumed", "declared", "detected", "measured", "counted")


def _derived_provenance(derivation: Derivation) -> Provenance:
    """The weakest provenance among a derivation's inputs (``detected`` when it has none)."""
    found = {i.provenance for i in derivation.inputs}
    for prov in _WEAKEST_FIRST:
        if prov in found:
            return prov
    return "detected"


def _input(symbol: str, quantity: Quantity, unit: str, provenance: Provenance, source: str = "") -> Input:
    """Return ``quantity`` as an :class:`Input` named ``symbol``."""
    if isinstance(quantity, Input):
        return Input(
            name=symbol,
            value=quantity.value,
            unit=quantity.unit or unit,
            provenance=quantity.provenance,
            source=quantity.source or source,
        )
    if isinstance(quantity, Derivation):
        text = f"{quantity.name} = {quantity.formula}"
        return Input(
            name=symbol,
            value=quantity.value,
            unit=quantity.unit or unit,
            provenance=_derived_provenance(quantity),
            source=text,
        )
    return Input(name=symbol, value=quantity, unit=unit, provenance=provenance, source=source)


def _number(inp: Input) -> float | None:
    """The input's value as a finite float, or ``None``."""
    value = inp.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _pace_label(pace: str) -> str:
    if pace not in PACES:
        raise ValueError(f"unknown pace {pace!r}; valid: {', '.join(PACES)}")
    return pace


def mfu(
    flops_per_token: Quantity,
    tokens_per_s: Quantity,
    devices: Quantity,
    peak_flops_per_s: Quantity | PeakRow,
    *,
    pace: Pace = "training-only",
    peak_missing: str | None = None,
) -> Derivation:
    """Model FLOPs utilization, a 0-1 fraction: F x tokens/s / (devices x peak).

    Args:
        flops_per_token: F, FLOP per token (e.g. a ``flops_per_token.<convention>`` Derivation).
        tokens_per_s: Tokens per second over all devices; ``pace`` says which clock
            (``training-only``: time inside steps; ``session``: wall clock).
        devices: Number of devices the peak applies to.
        peak_flops_per_s: Dense peak per device in FLOP/s, or a :class:`PeakRow`
            (its TFLOP/s, provenance and source are used); ``None`` when unknown.
        pace: Which tokens/s this is; the name is ``mfu`` or ``mfu.session``.
        peak_missing: Why there is no peak (e.g. from :func:`trainmeter.compute.peaks.why_no_peak`).

    Returns:
        A Derivation in unit ``fraction``; value ``None`` with ``missing`` naming
        the input (for a missing peak: ``--peak-tflops X --peak-source TEXT``).
    """
    _pace_label(pace)
    name = "mfu" if pace == "training-only" else "mfu.session"
    if isinstance(peak_flops_per_s, PeakRow):
        peak_in = Input(
            name="peak",
            value=peak_flops_per_s.flops_per_s,
            unit="FLOP/s",
            provenance=peak_flops_per_s.provenance,
            source=f"{peak_flops_per_s.card} dense {peak_flops_per_s.dtype}: {peak_flops_per_s.source}",
        )
    else:
        peak_in = _input("peak", peak_flops_per_s, "FLOP/s", "detected", "datasheet dense peak")
    inputs = (
        _input("F", flops_per_token, "FLOP/token", "detected"),
        _input("tokens_per_s", tokens_per_s, "tokens/s", "measured", f"{pace} tokens/s"),
        _input("devices", devices, "1", "detected"),
        peak_in,
    )
    formula = "F * tokens_per_s / (devices * peak)"
    f, tps, n, peak = (_number(i) for i in inputs)
    missing = None
    if peak is None or peak <= 0:
        why = peak_missing or "no dense peak for this device and dtype"
        missing = why if PEAK_FLAGS in why else f"{why}; pass {PEAK_FLAGS} to declare one"
    elif f is None:
        missing = "FLOPs per token unknown: pass the model, or declare --layers N --d-model D --seq-len S"
    elif tps is None:
        missing = f"{pace} tokens/s not measured yet"
    elif n is None or n < 1:
        missing = "number of devices unknown"
    if missing is not None:
        return Derivation(name=name, formula=formula, value=None, unit="fraction", inputs=inputs, missing=missing)
    assert f is not None and tps is not None and n is not None and peak is not None
    return Derivation(name=name, formula=formula, value=f * tps / (n * peak), unit="fraction", inputs=inputs)


def flops_spent(flops_per_token: Quantity, tokens: Quantity) -> Derivation:
    """FLOPs spent so far: F x tokens seen (unit ``FLOP``); ``None`` value when either is missing."""
    inputs = (_input("F", flops_per_token, "FLOP/token", "detected"), _input("tokens", tokens, "tokens", "counted"))
    f, t = (_number(i) for i in inputs)
    if f is None or t is None:
        miss = "FLOPs per token unknown" if f is None else "tokens seen unknown"
        return Derivation(
            name="flops_spent", formula="F * tokens", value=None, unit="FLOP", inputs=inputs, missing=miss
        )
    return Derivation(name="flops_spent", formula="F * tokens", value=f * t, unit="FLOP", inputs=inputs)


def budget_tokens(
    flops_per_token: Quantity = None,
    *,
    tokens: Quantity = None,
    steps: Quantity = None,
    tokens_per_step: Quantity = None,
    flops: Quantity = None,
) -> Derivation:
    """The budget in tokens, from exactly one of: tokens, steps (x tokens per step), or FLOPs (/ F).

    Plain numbers for ``tokens``, ``steps`` and ``flops`` count as ``declared``;
    ``tokens_per_step`` as ``counted``.

    Raises:
        ValueError: None or more than one budget kind is given.
    """
    given = [k for k, v in (("tokens", tokens), ("steps", steps), ("flops", flops)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            f"give exactly one budget (--budget-tokens, --budget-steps or --budget-flops); got "
            f"{', '.join(given) or 'none'}"
        )
    if tokens is not None:
        inp = _input("budget_tokens", tokens, "tokens", "declared", "--budget-tokens")
        return Derivation(
            name="budget_tokens",
            formula="budget_tokens",
            value=_number(inp),
            unit="tokens",
            inputs=(inp,),
            missing=None if _number(inp) is not None else "budget tokens not a number",
        )
    if steps is not None:
        inputs = (
            _input("budget_steps", steps, "steps", "declared", "--budget-steps"),
            _input("tokens_per_step", tokens_per_step, "tokens/step", "counted"),
        )
        s, tps = (_number(i) for i in inputs)
        value = None if s is None or tps is None else s * tps
        return Derivation(
            name="budget_tokens",
            formula="budget_steps * tokens_per_step",
            value=value,
            unit="tokens",
            inputs=inputs,
            missing=None if value is not None else "tokens per step not counted yet",
        )
    inputs = (
        _input("budget_flops", flops, "FLOP", "declared", "--budget-flops"),
        _input("F", flops_per_token, "FLOP/token", "detected"),
    )
    b, f = (_number(i) for i in inputs)
    value = None if b is None or f is None or f <= 0 else b / f
    return Derivation(
        name="budget_tokens",
        formula="budget_flops / F",
        value=value,
        unit="tokens",
        inputs=inputs,
        missing=None if value is not None else "FLOPs per token unknown",
    )


def flops_required(
    flops_per_token: Quantity,
    *,
    tokens: Quantity = None,
    steps: Quantity = None,
    tokens_per_step: Quantity = None,
    flops: Quantity = None,
) -> Derivation:
    """FLOPs the whole budget takes: the declared FLOPs, or F x budget tokens (tokens or steps x tokens per step).

    Raises:
        ValueError: None or more than one budget kind is given.
    """
    if flops is not None and tokens is None and steps is None:
        inp = _input("budget_flops", flops, "FLOP", "declared", "--budget-flops")
        value = _number(inp)
        return Derivation(
            name="flops_required",
            formula="budget_flops",
            value=value,
            unit="FLOP",
            inputs=(inp,),
            missing=None if value is not None else "budget FLOPs not a number",
        )
    budget = budget_tokens(flops_per_token, tokens=tokens, steps=steps, tokens_per_step=tokens_per_step, flops=flops)
    inputs = (
        _input("F", flops_per_token, "FLOP/token", "detected"),
        _input("budget_tokens", budget, "tokens", "declared"),
    )
    f, b = (_number(i) for i in inputs)
    if f is None or b is None:
        miss = "FLOPs per token unknown" if f is None else (budget.missing or "budget tokens unknown")
        return Derivation(
            name="flops_required", formula="F * budget_tokens", value=None, unit="FLOP", inputs=inputs, missing=miss
        )
    return Derivation(name="flops_required", formula="F * budget_tokens", value=f * b, unit="FLOP", inputs=inputs)


def progress(tokens_seen: Quantity, budget: Quantity) -> Derivation:
    """Fraction of the budget done, clamped to 0..1: tokens_seen / budget_tokens."""
    inputs = (
        _input("tokens_seen", tokens_seen, "tokens", "counted"),
        _input("budget_tokens", budget, "tokens", "declared"),
    )
    seen, total = (_number(i) for i in inputs)
    formula = "min(1, tokens_seen / budget_tokens)"
    if seen is None or total is None or total <= 0:
        miss = (
            "no budget: pass --budget-tokens, --budget-steps or --budget-flops"
            if total is None or total <= 0
            else "tokens seen unknown"
        )
        return Derivation(name="progress", formula=formula, value=None, unit="fraction", inputs=inputs, missing=miss)
    return Derivation(
        name="progress", formula=formula, value=min(1.0, max(0.0, seen / total)), unit="fraction", inputs=inputs
    )


def eta_s(
    tokens_seen: Quantity, budget: Quantity, tokens_per_s: Quantity, *, pace: Pace = "training-only"
) -> Derivation:
    """Seconds left at the given pace: max(budget - seen, 0) / tokens/s.

    Args:
        tokens_seen: Tokens done so far.
        budget: Budget in tokens (e.g. a :func:`budget_tokens` Derivation).
        tokens_per_s: Current pace in tokens/s.
        pace: Which pace ``tokens_per_s`` is (``training-only`` or ``session``);
            recorded as an input named ``pace`` and in the name (``eta_s`` or ``eta_s.session``).
    """
    _pace_label(pace)
    name = "eta_s" if pace == "training-only" else "eta_s.session"
    inputs = (
        _input("tokens_seen", tokens_seen, "tokens", "counted"),
        _input("budget_tokens", budget, "tokens", "declared"),
        _input("tokens_per_s", tokens_per_s, "tokens/s", "measured", f"{pace} tokens/s"),
        Input(
            name="pace",
            value=pace,
            unit="",
            provenance="assumed" if pace == "training-only" else "declared",
            source="which tokens/s the ETA uses",
        ),
    )
    seen, total, tps = (_number(i) for i in inputs[:3])
    formula = "max(budget_tokens - tokens_seen, 0) / tokens_per_s"
    miss = None
    if total is None or total <= 0:
        miss = "no budget: pass --budget-tokens, --budget-steps or --budget-flops"
    elif seen is None:
        miss = "tokens seen unknown"
    elif tps is None or tps <= 0:
        miss = f"{pace} tokens/s not measured yet"
    if miss is not None:
        return Derivation(name=name, formula=formula, value=None, unit="s", inputs=inputs, missing=miss)
    assert total is not None and seen is not None and tps is not None
    return Derivation(name=name, formula=formula, value=max(total - seen, 0.0) / tps, unit="s", inputs=inputs)


def parse_peak_args(peak_tflops: object, peak_source: object, dtype: object = None) -> PeakRow | None:
    """``--peak-tflops X --peak-source TEXT`` as a declared :class:`PeakRow`, checked by :func:`validate_peak`.

    Args:
        peak_tflops: Dense peak per device in TFLOP/s (number or numeric string), or ``None``.
        peak_source: Where the figure comes from (free text, required with a peak), or ``None``.
        dtype: The dtype the peak is for (``bf16``...), or ``None`` for any.

    Returns:
        ``None`` when neither is given, else a PeakRow with card ``"declared"`` and provenance ``declared``.

    Raises:
        ValueError: As :func:`trainmeter.compute.peaks.validate_peak` (the one check and limit).
    """
    value = validate_peak(peak_tflops, peak_source)
    if value is None:
        return None
    canonical = "any" if dtype is None else normalize_dtype(dtype)
    return PeakRow(
        card="declared", dtype=canonical, tflops=value, source=str(peak_source).strip(), provenance="declared"
    )
