"""Formula vs hardware: the model-FLOPs MFU checked against what the tensor pipes report doing. Pure.

r = formula MFU / OFU is judged against :data:`DISAGREE_FACTOR` either way; outside the band the rules of
docs/spec.md section 8, "Formula vs hardware", name the likely cause (first match).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmeter.core.provenance import Derivation, Input
from trainmeter.gpu.ladder import _pct

DISAGREE_FACTOR = 2.0  # formula and hardware disagree when one is more than this many times the other
SAMPLES_RATIO = 1.0 / 16.0  # a formula this far below the hardware counts samples, not tokens (S >= 16 lost)
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
    """Formula MFU beside the tensor pipes' view (OFU x dense peak, FLOP/s), ``ratio`` formula_mfu / ofu and the
    ``verdict`` (``agree``, ``formula_high``, ``formula_low``, ``None``: not judged): docs/spec.md section 8."""

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


def cross_check(ofu: Derivation, *, tensor_activity: float | None, peak_flops_per_s: float | None,
                peak_source: str = "dense peak", formula_mfu: float | None, counted_mfu: float | None = None,
                tokens_are_samples: bool = False) -> CrossCheck:
    """Compare the formula MFU (and the ``counted`` one) with the ladder's ``ofu`` derivation; the dense peak in
    FLOP/s and GPM ``tensor_activity`` (0-1) may be ``None``; ``tokens_are_samples``: the run counts samples."""
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
    elif counted_mfu is not None and 1.0 / DISAGREE_FACTOR <= counted_mfu / ofu.value <= DISAGREE_FACTOR:
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
