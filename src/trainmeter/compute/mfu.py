"""MFU, FLOPs spent and required, and progress: pure functions returning Derivations (docs/spec.md section 5).

Every quantity is a number, an ``Input``, a ``Derivation`` or ``None`` (the result's value is then ``None`` and
``missing`` says what would enable it). Never imports torch. Pure and thread-safe.
"""

from __future__ import annotations

from typing import Literal

from trainmeter.compute.eta import NO_BUDGET
from trainmeter.compute.peaks import PEAK_FLAGS, PeakRow, normalize_dtype, validate_peak
from trainmeter.core.provenance import Derivation, Input, Quantity, as_input, input_number

PACES: tuple[str, ...] = ("training-only", "session")  # tokens/s over time inside training steps; over the wall clock
Pace = Literal["training-only", "session"]


def mfu_name(convention: str, pace: str = "training-only", prefix: str = "") -> str:
    """``mfu[hf]``, ``mfu.session[hf]`` (``ValueError`` for a pace not in :data:`PACES`); a launch's: ``prefix``."""
    if pace not in PACES:
        raise ValueError(f"unknown pace {pace!r}; valid: {', '.join(PACES)}")
    return f"{prefix}mfu{'.session' if pace == 'session' else ''}[{convention}]"


def mfu(flops_per_token: Quantity, tokens_per_s: Quantity, devices: Quantity, peak_flops_per_s: Quantity | PeakRow, *,
        pace: Pace = "training-only", peak_missing: str | None = None, unit: str = "tokens") -> Derivation:
    """Model FLOPs utilization of one run, a 0-1 fraction: F x tokens/s (on the clock ``pace`` names: ``mfu`` or
    ``mfu.session``) / (devices x dense peak per device, FLOP/s, a :class:`PeakRow` or an Input kept as it is: the
    measured ceiling's; ``peak_missing``: why there is none); ``unit`` ``samples``: F per sample, samples/s."""
    peak_in = (peak_input(peak_flops_per_s) if isinstance(peak_flops_per_s, PeakRow) else peak_flops_per_s
               if isinstance(peak_flops_per_s, Input) else
               as_input("peak", peak_flops_per_s, "FLOP/s", "detected", "datasheet dense peak"))
    return mfu_derivation(name=mfu_name("", pace).removesuffix("[]"),
                          flops_per_token=as_input("F", flops_per_token, f"FLOP/{unit[:-1]}", "detected"),
                          rate=(as_input(f"{unit}_per_s", tokens_per_s, f"{unit}/s", "measured", f"{pace} {unit}/s"),),
                          devices=as_input("devices", devices, "1", "detected"), peaks=(peak_in,), pace=pace,
                          peak_missing=peak_missing)


def peak_input(row: PeakRow, name: str = "peak") -> Input:
    """A :class:`PeakRow` as the ``peak`` input of an MFU derivation (FLOP/s, its provenance and cited source)."""
    return Input(name=name, value=row.flops_per_s, unit="FLOP/s", provenance=row.provenance,
                 source=f"{row.card} dense {row.dtype}: {row.source}")


def mfu_derivation(*, name: str, flops_per_token: Input, rate: tuple[Input] | tuple[Input, Input], devices: Input,
                   peaks: tuple[Input, ...], pace: str = "training-only", peak_missing: str | None = None,
                   missing: str | None = None) -> Derivation:
    """The one MFU formula and its checks (docs/spec.md section 5), for a run and for a launch of ranks: F x ``rate``
    (``(tokens_per_s,)`` or ``(tokens, seconds)``) / (``devices`` x one peak, or the sum of one peak per device);
    ``missing``: a reason the caller already knows (a launch's missing rank)."""
    per_rank = len(peaks) > 1
    capacity = "sum over ranks of peak" if per_rank else "devices * peak"
    formula = f"F * {' / '.join(i.name for i in rate)} / ({capacity})"
    inputs = (flops_per_token, *rate, devices, *peaks)
    f, n = input_number(flops_per_token), input_number(devices)
    tokens = input_number(rate[0])
    seconds = input_number(rate[1]) if len(rate) == 2 else 1.0
    if seconds is None or seconds <= 0:
        tokens = None  # a rate over no measured seconds is no rate
    known = [v for v in map(input_number, peaks) if v is not None and v > 0]
    denominator = (sum(known) if per_rank else (n or 0) * known[0]) if len(known) == len(peaks) else None
    if missing is None:
        if denominator is None:
            why = peak_missing or "no dense peak for this device and dtype"
            missing = why if PEAK_FLAGS in why else f"{why}; pass {PEAK_FLAGS} to declare one"
        elif f is None:
            missing = "FLOPs per token unknown: pass the model, or declare --layers N --d-model D --seq-len S"
        elif tokens is None:
            missing = f"{pace} tokens/s not measured yet"
        elif n is None or n < 1:
            missing = "number of devices unknown"
    if missing is not None or f is None or tokens is None or seconds is None or not denominator:
        return Derivation(name=name, formula=formula, value=None, unit="fraction", inputs=inputs,
                          missing=missing or "an input is missing")
    value = f * tokens / denominator if len(rate) == 1 else f * tokens / seconds / denominator
    return Derivation(name=name, formula=formula, value=value, unit="fraction", inputs=inputs)


def flops_spent(flops_per_token: Quantity, tokens: Quantity, *, unit: str = "tokens") -> Derivation:
    """FLOPs spent so far: F x tokens (or samples, ``unit``) seen (unit ``FLOP``); ``None`` when either is missing."""
    inputs = (as_input("F", flops_per_token, f"FLOP/{unit[:-1]}", "detected"),
              as_input("tokens", tokens, unit, "counted"))
    f, t = (input_number(i) for i in inputs)
    miss = f"FLOPs per {unit[:-1]} unknown" if f is None else f"{unit} seen unknown" if t is None else None
    return Derivation(name="flops_spent", formula="F * tokens", value=None if miss else f * t,  # type: ignore[operator]
                      unit="FLOP", inputs=inputs, missing=miss)


def budget_tokens(flops_per_token: Quantity = None, *, tokens: Quantity = None, steps: Quantity = None,
                  tokens_per_step: Quantity = None, flops: Quantity = None) -> Derivation:
    """The budget in tokens from exactly one of tokens, steps (x tokens per step) or FLOPs (/ F) (``ValueError``
    otherwise); plain numbers count as ``declared``, ``tokens_per_step`` as ``counted``."""
    given = [k for k, v in (("tokens", tokens), ("steps", steps), ("flops", flops)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one budget (--budget-tokens, --budget-steps or --budget-flops); got "
                         f"{', '.join(given) or 'none'}")
    if tokens is not None:
        inp = as_input("budget_tokens", tokens, "tokens", "declared", "--budget-tokens")
        value = input_number(inp)
        return Derivation(name="budget_tokens", formula="budget_tokens", value=value, unit="tokens", inputs=(inp,),
                          missing=None if value is not None else "budget tokens not a number")
    if steps is not None:
        inputs = (as_input("budget_steps", steps, "steps", "declared", "--budget-steps"),
                  as_input("tokens_per_step", tokens_per_step, "tokens/step", "counted"))
        s, tps = (input_number(i) for i in inputs)
        value = None if s is None or tps is None else s * tps
        return Derivation(name="budget_tokens", formula="budget_steps * tokens_per_step", value=value, unit="tokens",
                          inputs=inputs, missing=None if value is not None else "tokens per step not counted yet")
    inputs = (as_input("budget_flops", flops, "FLOP", "declared", "--budget-flops"),
              as_input("F", flops_per_token, "FLOP/token", "detected"))
    b, f = (input_number(i) for i in inputs)
    value = None if b is None or f is None or f <= 0 else b / f
    return Derivation(name="budget_tokens", formula="budget_flops / F", value=value, unit="tokens", inputs=inputs,
                      missing=None if value is not None else "FLOPs per token unknown")


def flops_required(flops_per_token: Quantity, *, tokens: Quantity = None, steps: Quantity = None,
                   tokens_per_step: Quantity = None, flops: Quantity = None) -> Derivation:
    """FLOPs the whole budget takes: the declared FLOPs, or F x budget tokens (``ValueError`` as :func:`budget_tokens`)."""
    if flops is not None and tokens is None and steps is None:
        inp = as_input("budget_flops", flops, "FLOP", "declared", "--budget-flops")
        value = input_number(inp)
        return Derivation(name="flops_required", formula="budget_flops", value=value, unit="FLOP", inputs=(inp,),
                          missing=None if value is not None else "budget FLOPs not a number")
    budget = budget_tokens(flops_per_token, tokens=tokens, steps=steps, tokens_per_step=tokens_per_step, flops=flops)
    inputs = (as_input("F", flops_per_token, "FLOP/token", "detected"),
              as_input("budget_tokens", budget, "tokens", "declared"))
    f, b = (input_number(i) for i in inputs)
    miss = "FLOPs per token unknown" if f is None else (budget.missing or "budget tokens unknown") if b is None else None
    return Derivation(name="flops_required", formula="F * budget_tokens", value=None if miss else f * b,  # type: ignore[operator]
                      unit="FLOP", inputs=inputs, missing=miss)


def progress(done: Quantity, budget: Quantity, *, steps: bool = False) -> Derivation:
    """Fraction of the budget done, clamped to 0..1: tokens_seen / budget_tokens (``steps``: steps / budget_steps)."""
    seen_name, budget_name = ("steps", "budget_steps") if steps else ("tokens_seen", "budget_tokens")
    unit, sources = ("1", ("optimizer steps", "--budget-steps")) if steps else ("tokens", ("", ""))
    inputs = (as_input(seen_name, done, unit, "counted", sources[0]),
              as_input(budget_name, budget, unit, "declared", sources[1]))
    seen, total = (input_number(i) for i in inputs)
    miss = NO_BUDGET if total is None or total <= 0 else "tokens seen unknown" if seen is None else None
    return Derivation(name="progress", formula=f"min(1, {seen_name} / {budget_name})", unit="fraction", inputs=inputs,
                      value=None if miss else min(1.0, max(0.0, seen / total)), missing=miss)  # type: ignore[operator]


def parse_peak_args(peak_tflops: object, peak_source: object, dtype: object = None) -> PeakRow | None:
    """``--peak-tflops X --peak-source TEXT`` (for ``dtype``, ``None``: any) as a declared :class:`PeakRow` (card
    ``"declared"``), or ``None`` when neither is given; ``ValueError`` as :func:`validate_peak`."""
    value = validate_peak(peak_tflops, peak_source)
    if value is None:
        return None
    canonical = "any" if dtype is None else normalize_dtype(dtype)
    return PeakRow(card="declared", dtype=canonical, tflops=value, source=str(peak_source).strip(),
                   provenance="declared")
