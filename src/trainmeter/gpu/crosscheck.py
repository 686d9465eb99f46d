"""Formula vs hardware: the model-FLOPs MFU checked against what the tensor pipes report doing. Pure.

The hardware side: observed tensor FLOP/s = OFU x dense peak, where OFU = tensor activity x min(SM clock /
max SM clock, 1) (the ladder's estimate, docs/spec.md section 8). The formula side: MFU = F x tokens/s /
peak from the compute wing (and, when counted, the FlopCounterMode MFU). Their ratio formula / hardware is
1 when the FLOP count, the tokens and the peak all describe what the GPU did; beyond :data:`DISAGREE_FACTOR`
either way a verdict names the likely cause. Rules (first match wins), with r = formula MFU / OFU:

| r                     | also                                        | cause                  |
|-----------------------|---------------------------------------------|------------------------|
| < 1 / F               | tokens counted as samples, or r < 1/16      | :data:`CAUSE_SAMPLES`  |
| < 1 / F or > F        | counted MFU agrees with OFU (within F)      | :data:`CAUSE_CONVENTION` |
| > F                   | tensor activity < 0.20                      | :data:`CAUSE_OUTSIDE`  |
| < 1 / F or > F        | (otherwise)                                 | :data:`CAUSE_PEAK`     |
| within [1 / F, F]     |                                             | agree                  |

Recomputation (activation checkpointing) and padding make the hardware legitimately do ~1.3x the model
FLOPs; the factor 2 leaves room for them. OFU is an estimate (clock scaling, tile quantization), so the
verdict says "likely".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmeter.core.provenance import Derivation, Input

DISAGREE_FACTOR = 2.0
"""Formula and hardware disagree when one is more than this many times the other."""
SAMPLES_RATIO = 1.0 / 16.0
"""A formula this far below the hardware is tokens counted per sample (S >= 16 lost from F x tokens/s)."""
LOW_TENSOR = 0.20

CAUSE_SAMPLES = ("a model counted in samples: tokens/s counts sequences, not tokens, so F x tokens/s is short "
                 "by the sequence length (pass token counts, or --seq-len with samples)")
CAUSE_CONVENTION = ("the convention's attention term or S is wrong: the counted (FlopCounterMode) FLOPs agree with "
                    "the tensor pipes, the convention's do not (check --seq-len and the convention)")
CAUSE_OUTSIDE = ("work outside the tensor cores: the formula's FLOPs run as FP32, elementwise or non-tensor math "
                 "the tensor pipes do not see (autocast to bf16/fp16, or enable TF32)")
CAUSE_PEAK = ("wrong peak or dtype: the peak divided by is not the rate of the dtype the tensor cores run (e.g. a "
              "BF16 peak for TF32 or FP8 matmuls, or a declared peak off)")


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossCheck:
    """Formula MFU beside the tensor pipes' view, and the verdict.

    Attributes:
        observed_flops_per_s: OFU x dense peak (FLOP/s), a Derivation (value ``None`` when an input is missing).
        ofu: The hardware fraction of peak (OFU estimate), or ``None``.
        formula_mfu: MFU by the chosen convention, or ``None``.
        counted_mfu: MFU by the counted FLOPs, or ``None``.
        ratio: formula_mfu / ofu, or ``None``.
        verdict: ``agree``, ``formula_high``, ``formula_low``, or ``None`` when it cannot be judged.
        cause: The likely cause when they disagree, else ``None``.
        sentence: One line for the ladder and the passport.
    """

    observed_flops_per_s: Derivation
    ofu: float | None
    formula_mfu: float | None
    counted_mfu: float | None
    ratio: float | None
    verdict: str | None
    cause: str | None
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the passport."""
        return {"observed_flops_per_s": self.observed_flops_per_s.value, "ofu": self.ofu,
                "formula_mfu": self.formula_mfu, "counted_mfu": self.counted_mfu, "ratio": self.ratio,
                "verdict": self.verdict, "cause": self.cause, "sentence": self.sentence,
                "factor": DISAGREE_FACTOR, "derivation": self.observed_flops_per_s.to_dict()}


def _pct(v: float) -> str:
    return f"{v * 100:.0f}%"


def _within(a: float, b: float) -> bool:
    return b > 0 and 1.0 / DISAGREE_FACTOR <= a / b <= DISAGREE_FACTOR


def cross_check(ofu: Derivation, *, tensor_activity: float | None, peak_flops_per_s: float | None,
                peak_source: str = "dense peak", formula_mfu: float | None, counted_mfu: float | None = None,
                tokens_are_samples: bool = False) -> CrossCheck:
    """Compare the formula MFU with the tensor pipes (rules in the module docstring).

    Args:
        ofu: The ladder's OFU derivation (tensor activity x clock ratio).
        tensor_activity: GPM tensor activity 0-1, or ``None``.
        peak_flops_per_s: The dense peak the MFU divides by (FLOP/s), or ``None``.
        peak_source: Where the peak comes from.
        formula_mfu: MFU under the chosen convention, or ``None``.
        counted_mfu: MFU under the counted FLOPs, or ``None``.
        tokens_are_samples: The run counts samples (sequences), not tokens.
    """
    peak_in = Input(name="peak", value=peak_flops_per_s, unit="FLOP/s", provenance="detected", source=peak_source)
    ofu_in = Input(name="ofu", value=ofu.value, unit="fraction", provenance="measured", source=ofu.formula)
    missing = None
    if ofu.value is None:
        missing = f"OFU: {ofu.missing}"
    elif not peak_flops_per_s:
        missing = "no dense peak for this device and dtype"
    observed = Derivation(name="observed_tensor_flops_per_s", formula="ofu x peak",
                          value=None if missing else ofu.value * peak_flops_per_s, unit="FLOP/s",
                          inputs=(ofu_in, peak_in), missing=missing)
    base = dict(observed_flops_per_s=observed, ofu=ofu.value, formula_mfu=formula_mfu, counted_mfu=counted_mfu)
    if ofu.value is None or formula_mfu is None:
        need = f"OFU ({ofu.missing})" if ofu.value is None else "MFU by formula (a convention and a peak)"
        return CrossCheck(**base, ratio=None, verdict=None, cause=None,
                          sentence=f"Formula vs hardware: not judged, needs {need}.")
    if ofu.value <= 0:
        return CrossCheck(**base, ratio=None, verdict=None, cause=None,
                          sentence="Formula vs hardware: not judged, the tensor pipes read idle (OFU 0%).")
    ratio = formula_mfu / ofu.value
    head = f"Formula MFU {_pct(formula_mfu)} vs tensor pipes (OFU) {_pct(ofu.value)}"
    if 1.0 / DISAGREE_FACTOR <= ratio <= DISAGREE_FACTOR:
        return CrossCheck(**base, ratio=ratio, verdict="agree", cause=None,
                          sentence=f"{head}: agree within {DISAGREE_FACTOR:g}x.")
    low = ratio < 1.0 / DISAGREE_FACTOR
    if low and (tokens_are_samples or ratio < SAMPLES_RATIO):
        cause = CAUSE_SAMPLES
    elif counted_mfu is not None and _within(counted_mfu, ofu.value):
        cause = CAUSE_CONVENTION
    elif not low and tensor_activity is not None and tensor_activity < LOW_TENSOR:
        cause = CAUSE_OUTSIDE
    else:
        cause = CAUSE_PEAK
    verdict = "formula_low" if low else "formula_high"
    side = "below" if low else "above"
    return CrossCheck(**base, ratio=ratio, verdict=verdict, cause=cause,
                      sentence=f"{head}: the formula is {ratio:.2g}x the hardware, {side} the "
                               f"{DISAGREE_FACTOR:g}x band; likely {cause}.")
