"""The utilization ladder: GPU-Util -> SM activity -> tensor activity -> MFU, and where it falls off. Pure.

Beside the rungs: OFU (an estimate after Pedersen et al., arXiv 2605.20799), DRAM bandwidth utilization and the
arithmetic intensity. The fall-off rules and their sentence: docs/spec.md section 8 (thresholds below). Formula vs
hardware: the model-FLOPs MFU checked against what the tensor pipes report doing, r = formula MFU / OFU judged against
:data:`DISAGREE_FACTOR` either way; outside the band the rules of section 8, "Formula vs hardware", name the likely
cause (first match).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmeter.core.provenance import Derivation, Input, Provenance

if TYPE_CHECKING:
    from trainmeter.gpu.backend import GpuSample
    from trainmeter.gpu.device_state import GpuAverages

    LadderInputs = GpuSample | GpuAverages  # what the ladder reads: a sample or averages

GPU_UTIL_LOW = 0.70
SM_ACTIVITY_LOW = 0.50
TENSOR_ACTIVITY_LOW = 0.20
DRAM_BOUND = 0.50
MFU_VS_OFU = 0.5
MFU_LOW = 0.20

OFU_NOTE = (
    "estimate: tensor activity x SM clock / max SM clock (OFU, Pedersen et al., arXiv "
    "2605.20799), scaled to NVML's max SM clock, not a documented tensor clock")
INTENSITY_NOTE = "aggregate over the window, not per kernel; DRAM utilization tops out near 80%"

CAUSE_IDLE = (
    "the GPU is idle between kernels much of the time: input pipeline, host-side Python, "
    "synchronisation or communication waits")
CAUSE_LAUNCH_BOUND = "kernels too small or launch-bound"
CAUSE_MEMORY_BOUND = "memory-bound kernels (elementwise, normalisation, unfused attention)"
CAUSE_NON_TENSOR = (
    "the SMs run non-tensor work: FP32 math without autocast/bf16, elementwise ops, or "
    "shapes that miss the tensor cores")
CAUSE_UNCOUNTED = (
    "the tensor cores do work the model FLOP count leaves out (recomputation, padding, "
    "tile waste), or the FLOP count or peak is off")
CAUSE_LOW_MFU = (
    "little useful math per second despite the rungs above: small or odd-shaped matmuls, "
    "low clocks, or a slower dtype than the peak's")

SOURCES = {"gpu_util": "NVML nvmlDeviceGetUtilizationRates().gpu (share of time any kernel ran)",
           "sm_activity": "NVML GPM SM_UTIL (metric 2)", "tensor_activity": "NVML GPM ANY_TENSOR_UTIL (metric 5)",
           "dram_bw_util": "NVML GPM DRAM_BW_UTIL (metric 10)", "sm_clock_mhz": "NVML nvmlDeviceGetClockInfo(SM)",
           "sm_clock_max_mhz": "NVML nvmlDeviceGetMaxClockInfo(SM)"}
LABELS = {"gpu_util": "GPU-Util", "sm_activity": "SM activity", "tensor_activity": "tensor activity", "mfu": "MFU"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rung:
    """One rung (``gpu_util``, ``sm_activity``, ``tensor_activity``, ``mfu``, ``dram_bw_util``): a fraction 0-1 or
    ``None`` (``missing``: why), its label, source and provenance."""

    key: str
    label: str
    value: float | None
    source: str
    provenance: Provenance
    missing: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ladder:
    """The ladder for one device (now, or averaged over a window): ``rungs`` (GPU-Util, SM activity, tensor
    activity, MFU), ``ofu`` (fraction), ``dram_bw_util``, ``arithmetic_intensity`` (FLOP per DRAM byte), the
    ``falloff`` rung's key (or ``None``) and the ``sentence`` naming it and its likely cause."""

    rungs: tuple[Rung, ...]
    ofu: Derivation
    dram_bw_util: Rung
    arithmetic_intensity: Derivation
    falloff: str | None
    sentence: str


def build_ladder(g: LadderInputs, *, mfu: float | None = None, mfu_source: str = "model FLOPs/s / dense peak FLOP/s",
                 mfu_provenance: Provenance = "counted", mfu_missing: str | None = None,
                 flop_per_s: float | None = None, flop_source: str = "model FLOP/s",
                 flop_provenance: Provenance = "counted", peak_dram_bytes_per_s: float | None = None,
                 peak_dram_source: str = "", sources: dict[str, str] | None = None,
                 device_name: str | None = None) -> Ladder:
    """Build the ladder from GPU readings ``g`` (a sample or averages) and, optionally, MFU (0-1); ``flop_per_s``
    (model FLOP/s per device) and ``peak_dram_*`` (default: :func:`peak_dram_bandwidth` of ``device_name``) give the
    arithmetic intensity; ``sources``: per-rung texts overriding :data:`SOURCES` (amdsmi's)."""
    if peak_dram_bytes_per_s is None and device_name:
        peak_dram_bytes_per_s, peak_dram_source = peak_dram_bandwidth(device_name) or (None, "")

    def measured(key: str) -> Rung:
        name = "util_gpu" if key == "gpu_util" else key  # rung key -> GpuSample field
        value = getattr(g, name, None)
        return Rung(key=key, label=LABELS.get(key, "DRAM bandwidth"), value=value,
                    source={**SOURCES, **(sources or {})}[key], provenance="measured",
                    missing=None if value is not None else (g.unavailable_reason(name) or "not read"))

    mfu_rung = Rung(key="mfu", label="MFU", value=mfu, source=mfu_source, provenance=mfu_provenance,
                    missing=None if mfu is not None else (mfu_missing or "no model FLOP count or no peak for this GPU"))
    rungs = (measured("gpu_util"), measured("sm_activity"), measured("tensor_activity"), mfu_rung)
    dram = measured("dram_bw_util")
    ofu = _ofu(g)
    intensity = _intensity(flop_per_s, flop_source, flop_provenance, dram, peak_dram_bytes_per_s, peak_dram_source)
    falloff, sentence = diagnose(rungs, ofu=ofu.value, dram_bw_util=dram.value)
    return Ladder(rungs=rungs, ofu=ofu, dram_bw_util=dram, arithmetic_intensity=intensity, falloff=falloff,
                  sentence=sentence)


# Datasheet peak DRAM bandwidth per GPU model (docs/spec.md section 8): (regex on the lower-cased NVML product name,
# NVIDIA's datasheet GB/s (decimal), model label), tried in order, most specific first; no match: None, never a guess
_DRAM_RULES: tuple[tuple[str, float, str], ...] = (
    (r"gh200.*144g", 4900, "GH200 144GB HBM3e"),
    (r"gh200", 4000, "GH200 96GB HBM3"),
    (r"gb200", 8000, "GB200"),
    (r"\bb200\b", 7700, "B200 (HGX)"),
    (r"\bb100\b", 8000, "B100"),
    (r"h200.*nvl", 4800, "H200 NVL"),
    (r"\bh200\b", 4800, "H200 SXM"),
    (r"h100.*nvl", 3900, "H100 NVL"),
    (r"h100.*pcie", 2000, "H100 PCIe"),
    (r"h100.*(hbm3|sxm)", 3350, "H100 SXM"),
    (r"a100.*pcie.*80gb|a100 80gb pcie", 1935, "A100 80GB PCIe"),
    (r"a100.*80gb", 2039, "A100 80GB SXM"),
    (r"a100.*40gb", 1555, "A100 40GB"),
    (r"\bl40s\b", 864, "L40S"),
    (r"\bl4\b", 300, "L4"),
    (r"\ba10g\b", 600, "A10G"),
    (r"\ba10\b", 600, "A10"),
    (r"\bt4\b", 320, "T4"),
    (r"v100s", 1134, "V100S PCIe"),
    (r"v100-sxm2", 900, "V100 SXM2"),
    (r"rtx 5090", 1792, "GeForce RTX 5090"),
    (r"rtx 4090", 1008, "GeForce RTX 4090"),
    (r"rtx 3090", 936, "GeForce RTX 3090"),
)


def peak_dram_bandwidth(name: str) -> tuple[float, str] | None:
    """``(bytes_per_s, source_text)`` for an NVML name (``"NVIDIA H100 80GB HBM3"``), or ``None`` (not in the table)."""
    key = name.lower().strip()
    for pattern, gb_per_s, label in _DRAM_RULES:
        if re.search(pattern, key):
            return gb_per_s * 1e9, f"{label}: {gb_per_s:g} GB/s, NVIDIA datasheet (nvml-gpm.md section 4)"
    return None


def _ofu(g: LadderInputs) -> Derivation:
    t, clk, clk_max = g.tensor_activity, g.sm_clock_mhz, g.sm_clock_max_mhz
    inputs = tuple(Input(name=name, value=v, unit=unit, provenance=prov, source=SOURCES[name])
                   for name, v, unit, prov in (("tensor_activity", t, "fraction", "measured"),
                                               ("sm_clock_mhz", clk, "MHz", "measured"),
                                               ("sm_clock_max_mhz", clk_max, "MHz", "detected")))
    value = missing = None
    if t is None:
        missing = f"tensor activity: {g.unavailable_reason('tensor_activity') or 'not read'}"
    elif clk is None or not clk_max:
        missing = "SM clock or its maximum not read"
    else:
        value = t * min(clk / clk_max, 1.0)
    return Derivation(name="ofu",
                      formula="tensor_activity x min(sm_clock_mhz / sm_clock_max_mhz, 1)  [" + OFU_NOTE + "]",
                      value=value, unit="fraction", inputs=inputs, missing=missing)


def _intensity(flop_per_s: float | None, flop_source: str, flop_provenance: Provenance, dram: Rung, peak: float | None,
               peak_source: str) -> Derivation:
    inputs = (
        Input(name="flop_per_s", value=flop_per_s, unit="FLOP/s", provenance=flop_provenance, source=flop_source),
        Input(name="dram_bw_util", value=dram.value, unit="fraction", provenance="measured", source=dram.source),
        Input(name="peak_dram_bytes_per_s", value=peak, unit="bytes/s", provenance="detected", source=peak_source))
    value = missing = None
    if flop_per_s is None:
        missing = "model FLOP/s (needs the FLOP count)"
    elif dram.value is None:
        missing = f"DRAM bandwidth utilization: {dram.missing}"
    elif not peak:
        missing = "peak DRAM bandwidth of this GPU (not in the datasheet table)"
    elif dram.value <= 0:
        missing = "no DRAM traffic measured in the window"
    else:
        value = flop_per_s / (dram.value * peak)
    return Derivation(name="arithmetic_intensity",
                      formula="flop_per_s / (dram_bw_util x peak_dram_bytes_per_s)  [" + INTENSITY_NOTE + "]",
                      value=value, unit="FLOP/byte", inputs=inputs, missing=missing)


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def diagnose(rungs: tuple[Rung, ...], *, ofu: float | None = None,
             dram_bw_util: float | None = None) -> tuple[str | None, str]:
    """Apply the fall-off rules (docs/spec.md section 8) to the four rungs: ``(falloff key or None, sentence)``."""
    known: list[Rung] = []  # the rungs passed so far; the last one is the rung above
    for rung in rungs:
        if rung.value is None:
            continue
        cause = _cause(rung, rung.value, ofu=ofu, dram_bw_util=dram_bw_util)
        if cause is not None:
            if not known:
                return rung.key, f"{rung.label} {_pct(rung.value)}: {cause}."
            head = f"{known[-1].label} {_pct(known[-1].value or 0.0)} but {rung.label} {_pct(rung.value)}"
            if cause in (CAUSE_MEMORY_BOUND, CAUSE_UNCOUNTED):  # causes judged on a figure beside the rungs: it
                head += (f" with DRAM bandwidth {_pct(dram_bw_util or 0.0)}" if cause == CAUSE_MEMORY_BOUND
                         else f" (OFU estimate {_pct(ofu or 0.0)})")
            return rung.key, f"{head}: {cause}."
        known.append(rung)
    if not known:
        reason = rungs[0].missing if rungs else None
        return None, f"No utilization readings: {reason or 'no GPU counters'}."
    listed = ", ".join(f"{r.label} {_pct(r.value or 0.0)}" for r in known)
    unknown = [r.label for r in rungs if r.value is None]
    tail = f" ({', '.join(unknown)} not available)" if unknown else ""
    return None, f"No fall-off: {listed}{tail}."


def _cause(rung: Rung, v: float, *, ofu: float | None, dram_bw_util: float | None) -> str | None:
    if rung.key == "gpu_util" and v < GPU_UTIL_LOW:
        return CAUSE_IDLE
    if rung.key == "sm_activity" and v < SM_ACTIVITY_LOW:
        return CAUSE_LAUNCH_BOUND
    if rung.key == "tensor_activity" and v < TENSOR_ACTIVITY_LOW:
        return CAUSE_MEMORY_BOUND if (dram_bw_util or 0.0) >= DRAM_BOUND else CAUSE_NON_TENSOR
    if rung.key == "mfu":
        if ofu is not None and v < MFU_VS_OFU * ofu:
            return CAUSE_UNCOUNTED
        if v < MFU_LOW:
            return CAUSE_LOW_MFU
    return None


def ladder_panel_rows(ladder: Ladder) -> list[dict[str, Any]]:
    """Rows for a widget ``panels`` entry (docs/protocol.md): one per rung plus extras."""
    rows = [{"label": r.label, "value": r.value, "unit": "fraction", "provenance": r.provenance,
             "note": r.missing if r.value is None else r.source} for r in (*ladder.rungs, ladder.dram_bw_util)]
    return rows + [{"label": label, "value": d.value, "unit": unit, "provenance": "measured",
                    "note": d.missing or d.formula}
                   for d, label, unit in ((ladder.ofu, "OFU (estimate)", "fraction"),
                                          (ladder.arithmetic_intensity, "arithmetic intensity", "FLOP/byte"))]


# --- formula vs hardware -----------------------------------------------------------------------------------

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
    sentence: str
    ratio: float | None = None
    verdict: str | None = None
    cause: str | None = None

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
        return CrossCheck(**base, sentence=f"Formula vs hardware: not judged, needs {need}.")
    if ofu.value <= 0:
        return CrossCheck(**base, sentence="Formula vs hardware: not judged, the tensor pipes read idle (OFU 0%).")
    ratio = formula_mfu / ofu.value
    head = f"Formula MFU {_pct(formula_mfu)} vs tensor pipes (OFU) {_pct(ofu.value)}"
    if 1.0 / DISAGREE_FACTOR <= ratio <= DISAGREE_FACTOR:
        return CrossCheck(**base, ratio=ratio, verdict="agree", sentence=f"{head}: agree within {DISAGREE_FACTOR:g}x.")
    low = ratio < 1.0 / DISAGREE_FACTOR
    if low and (tokens_are_samples or ratio < SAMPLES_RATIO):
        cause = CAUSE_SAMPLES
    elif counted_mfu is not None and 1.0 / DISAGREE_FACTOR <= counted_mfu / ofu.value <= DISAGREE_FACTOR:
        cause = CAUSE_CONVENTION
    elif not low and tensor_activity is not None and tensor_activity < LOW_TENSOR:
        cause = CAUSE_OUTSIDE
    else:
        cause = CAUSE_PEAK
    return CrossCheck(**base, ratio=ratio, verdict="formula_low" if low else "formula_high", cause=cause,
                      sentence=f"{head}: the formula is {ratio:.2g}x the hardware, {'below' if low else 'above'} the "
                               f"{DISAGREE_FACTOR:g}x band; likely {cause}.")
