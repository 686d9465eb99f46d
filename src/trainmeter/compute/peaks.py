"""Dense tensor-core peaks per card and dtype, each with its cited source.

Each figure cites an NVIDIA datasheet or whitepaper in its row (docs/spec.md
section 5 lists the table's sources). Where NVIDIA quotes only the
2:4-sparse figure, the dense peak is that figure / 2 (the datasheets' own
footnote: "specifications one-half lower without sparsity"). GeForce cards use
the FP32-accumulate rate (what PyTorch's bf16/fp16 GEMMs run at), half the
FP16-accumulate headline. A card or dtype the notes lack has no row: no peak,
no MFU, never a guess. Pure Python; never imports torch. Thread-safe.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from trainmeter.core.provenance import Provenance

MAX_PEAK_TFLOPS = 1e6
"""The one limit on a declared peak (docs/spec.md section 5): 1 EFLOP/s per device, far above any chip; a larger
figure is taken for a unit slip (FLOP/s given for TFLOP/s). The flag check and the compute wing both use it."""

DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8")
"""dtypes with a peak column."""

_DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "torch.half": "fp16",
    "tf32": "tf32",
    "fp8": "fp8",
    "float8": "fp8",
    "torch.float8_e4m3fn": "fp8",
    "torch.float8_e5m2": "fp8",
    "torch.float8_e4m3fnuz": "fp8",
    "torch.float8_e5m2fnuz": "fp8",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakRow:
    """A dense peak for one card and dtype.

    Attributes:
        card: The card the device name matched, e.g. ``"H100 SXM"``; ``"declared"`` for a user's peak.
        dtype: ``bf16``, ``fp16``, ``tf32`` or ``fp8`` (``"any"`` for a declared peak with no dtype).
        tflops: Dense peak in TFLOP/s (1e12 FLOP/s) per device.
        source: Cited source, including how the dense figure was derived.
        provenance: ``detected`` for a table row matched by device name, ``declared`` for a user's peak.
    """

    card: str
    dtype: str
    tflops: float
    source: str
    provenance: Provenance = "detected"

    @property
    def flops_per_s(self) -> float:
        """The peak in FLOP/s."""
        return self.tflops * 1e12


_REF = "nvml-gpm.md §4"
_S = "sparse figure / 2"


@dataclass(frozen=True, slots=True)
class _Card:
    """One table row: pattern, optional exclusion, peaks by dtype (``None``: dtype not supported), source."""

    pattern: str
    exclude: str | None
    card: str
    peaks: dict[str, float | None]
    source: str


def _peaks(bf16: float | None, fp16: float | None, tf32: float | None, fp8: float | None) -> dict[str, float | None]:
    return {"bf16": bf16, "fp16": fp16, "tf32": tf32, "fp8": fp8}


_H100_SXM = _peaks(989.5, 989.5, 494.5, 1979.0)
_H100_NVL = _peaks(835.5, 835.5, 417.5, 1670.5)
_A100 = _peaks(312.0, 312.0, 156.0, None)
_A100_SRC = f"NVIDIA A100 datasheet: 312 BF16/FP16, 156 TF32 dense (quoted directly); no FP8 ({_REF})"

# Most specific first: the first matching pattern wins. Patterns run on the lower-cased name.
_TABLE: tuple[_Card, ...] = (
    _Card(
        r"\bgb200\b",
        None,
        "GB200",
        _peaks(2500.0, 2500.0, 1250.0, 5000.0),
        f"NVIDIA GB200 NVL72 page, per-GPU column: 5000 BF16/FP16, 2500 TF32, 10000 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])b200\b",
        None,
        "B200",
        _peaks(2250.0, 2250.0, 1100.0, 4500.0),
        f"NVIDIA HGX/DGX B200 pages: 4500 BF16/FP16, 2200 TF32, 9000 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])b100\b",
        None,
        "B100",
        _peaks(1750.0, 1750.0, 875.0, 3500.0),
        f"NVIDIA Blackwell launch datasheet (HGX B100 / 8): 3500 BF16/FP16, 1750 TF32, 7000 FP8 with sparsity; "
        f"{_S} ({_REF})",
    ),
    _Card(
        r"\bgh200\b",
        None,
        "GH200",
        _H100_SXM,
        f"NVIDIA GH200 page: 1979 BF16/FP16, 989 TF32, 3958 FP8 with sparsity (H100 SXM compute); {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])h200\b.*\bnvl\b",
        None,
        "H200 NVL",
        _H100_NVL,
        f"NVIDIA H200 page, H200 NVL: 1671 BF16/FP16, 835 TF32, 3341 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])h200\b",
        None,
        "H200 SXM",
        _H100_SXM,
        f"NVIDIA H200 page, H200 SXM: 1979 BF16/FP16, 989 TF32, 3958 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])h100\b.*\bnvl\b",
        None,
        "H100 NVL",
        _H100_NVL,
        f"NVIDIA H100 page, H100 NVL per GPU: 1671 BF16/FP16, 835 TF32, 3341 FP8 with sparsity; {_S} "
        f"(the 2023 datasheet quoted the 2-GPU pair) ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])h100\b.*\bpcie\b",
        None,
        "H100 PCIe",
        _peaks(756.5, 756.5, 378.0, 1513.0),
        f"NVIDIA H100 datasheet, H100 PCIe: 1513 BF16/FP16, 756 TF32, 3026 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"(?<![a-z0-9])h100\b.*\b(sxm|hbm3)",
        None,
        "H100 SXM",
        _H100_SXM,
        f"NVIDIA H100 datasheet, H100 SXM: 1979 BF16/FP16, 989 TF32, 3958 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(
        r"\bl40s\b",
        None,
        "L40S",
        _peaks(362.0, 362.0, 183.0, 733.0),
        f"NVIDIA L40S datasheet: 362 BF16/FP16, 183 TF32, 733 FP8 dense (quoted directly) ({_REF})",
    ),
    _Card(
        r"\bl4\b",
        None,
        "L4",
        _peaks(121.0, 121.0, 60.0, 242.5),
        f"NVIDIA L4 datasheet: 242 BF16/FP16, 120 TF32, 485 FP8 with sparsity; {_S} ({_REF})",
    ),
    _Card(r"\ba100\b.*\bsxm4?\b.*\b80gb\b", None, "A100 SXM4 80GB", _A100, _A100_SRC),
    _Card(r"\ba100\b.*\bsxm4?\b.*\b40gb\b", None, "A100 SXM4 40GB", _A100, _A100_SRC),
    _Card(r"\ba100\b.*\bpcie\b.*\b40gb\b", None, "A100 PCIe 40GB", _A100, _A100_SRC),
    _Card(r"\ba100\b.*\b80gb\b.*\bpcie\b", None, "A100 PCIe 80GB", _A100, _A100_SRC),
    _Card(r"\ba100\b", None, "A100", _A100, _A100_SRC + "; variant not recognised, all A100 variants share these"),
    _Card(
        r"\ba10g\b",
        None,
        "A10G",
        _peaks(70.0, 70.0, None, None),
        f"no NVIDIA datasheet (AWS-only SKU): ~70 BF16/FP16 tensor per Baseten 'A10 vs A10G' and the nanochat "
        f"table, approximate; TF32 not published; no FP8 ({_REF})",
    ),
    _Card(
        r"\ba10\b",
        None,
        "A10",
        _peaks(125.0, 125.0, 62.5, None),
        f"NVIDIA A10 datasheet: 250 BF16/FP16, 125 TF32 with sparsity, 125 / 62.5 dense; no FP8 ({_REF})",
    ),
    _Card(
        r"\bt4\b",
        None,
        "T4",
        _peaks(None, 65.0, None, None),
        f"NVIDIA T4 datasheet: 65 FP16/FP32 mixed dense; Turing has no BF16, TF32 or FP8 ({_REF})",
    ),
    _Card(
        r"\bv100s\b",
        None,
        "V100S PCIe",
        _peaks(None, 130.0, None, None),
        f"NVIDIA V100 datasheet: V100S 130 FP16 tensor dense; Volta has no BF16, TF32 or FP8 ({_REF})",
    ),
    _Card(
        r"\bv100\b.*\bpcie\b",
        None,
        "V100 PCIe",
        _peaks(None, 112.0, None, None),
        f"NVIDIA V100 datasheet: PCIe 112 FP16 tensor dense; Volta has no BF16, TF32 or FP8 ({_REF})",
    ),
    _Card(
        r"\bv100\b.*\bsxm2?\b",
        None,
        "V100 SXM2",
        _peaks(None, 125.0, None, None),
        f"NVIDIA V100 datasheet: SXM2 125 FP16 tensor dense; Volta has no BF16, TF32 or FP8 ({_REF})",
    ),
    _Card(
        r"\brtx 5090\b",
        r"\b5090 ?d\b|laptop|mobile",
        "GeForce RTX 5090",
        _peaks(209.5, 209.5, 104.8, None),
        f"RTX Blackwell whitepaper / spec copies: 209.5 BF16/FP16 dense with FP32 accumulate, 104.8 TF32; "
        f"FP8 with FP32 accumulate not confirmed in the notes, so none ({_REF})",
    ),
    _Card(
        r"\brtx 4090\b",
        r"\b4090 ?d\b|laptop|mobile",
        "GeForce RTX 4090",
        _peaks(165.2, 165.2, 82.6, 330.3),
        f"NVIDIA Ada whitepaper: 165.2 BF16/FP16 and 330.3 FP8 dense with FP32 accumulate (half the FP16-accumulate "
        f"rate), 82.6 TF32 ({_REF})",
    ),
    _Card(
        r"\brtx 3090\b",
        r"\b3090 ?ti\b|laptop|mobile",
        "GeForce RTX 3090",
        _peaks(71.0, 71.0, 35.6, None),
        f"NVIDIA GA102 whitepaper: 71 BF16/FP16 dense with FP32 accumulate (142 with FP16 accumulate), "
        f"35.6 TF32; no FP8 ({_REF})",
    ),
)

_AMBIGUOUS: tuple[tuple[str, str], ...] = (
    (r"(?<![a-z0-9])h100\b", "H100 SXM, PCIe or NVL"),
    (r"\bv100\b", "V100 SXM2 or PCIe"),
)
"""Names that match a card family but not a variant: no peak, and the reason says so."""


def normalize_dtype(dtype: object) -> str:
    """Return the canonical dtype name (``bf16``, ``fp16``, ``tf32``, ``fp8``) for a name or torch dtype.

    Raises:
        ValueError: Unknown dtype; the message names it and lists the valid ones.
    """
    key = str(dtype).strip().lower()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    hint = ""
    if key in ("fp32", "float32", "float", "torch.float32", "torch.float"):
        hint = (
            " (float32 matmuls run on tensor cores only as TF32, when torch.backends.cuda.matmul.allow_tf32 "
            "or set_float32_matmul_precision('high') allows it; pass 'tf32' then)"
        )
    raise ValueError(
        f"unknown dtype {dtype!r} for a peak; valid: {', '.join(DTYPES)} "
        f"(or torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2){hint}"
    )


def _find(device_name: str) -> _Card | None:
    """Return the first table row whose pattern matches ``device_name`` (and whose exclusion does not)."""
    name = " ".join(str(device_name).lower().replace("_", " ").split())
    for row in _TABLE:
        if re.search(row.pattern, name) and not (row.exclude and re.search(row.exclude, name)):
            return row
    return None


def peak_flops(device_name: str, dtype: object = "bf16") -> PeakRow | None:
    """Return the dense peak of ``device_name`` for ``dtype``, or ``None``.

    Args:
        device_name: The NVML / CUDA device name, e.g. ``"NVIDIA H100 80GB HBM3"``.
        dtype: ``bf16``, ``fp16``, ``tf32``, ``fp8`` or a torch dtype (or its name).

    Returns:
        The matched :class:`PeakRow`, or ``None`` for an unknown card (or a name
        that does not say which variant it is) or a dtype the card lacks.
        :func:`why_no_peak` says which.

    Raises:
        ValueError: ``dtype`` is not a known dtype name.
    """
    canonical = normalize_dtype(dtype)
    row = _find(device_name)
    if row is None:
        return None
    value = row.peaks.get(canonical)
    if value is None:
        return None
    return PeakRow(card=row.card, dtype=canonical, tflops=value, source=row.source, provenance="detected")


def validate_peak(peak_tflops: object, peak_source: object) -> float | None:
    """The one check of ``--peak-tflops X --peak-source TEXT``: the peak in TFLOP/s, or ``None`` when neither is given.

    Used by the flag check (:func:`trainmeter.options.make_options`) and the compute wing, so a peak the
    flag accepts is one the wing divides by.

    Args:
        peak_tflops: Dense peak per device in TFLOP/s (number or numeric string), or ``None``.
        peak_source: Where the figure comes from (free text, required with a peak), or ``None``.

    Raises:
        ValueError: A peak without a source (or the reverse), a peak that is not a number, not finite,
            zero, negative or above :data:`MAX_PEAK_TFLOPS`; the message names the value and what is valid.
    """
    if peak_tflops is None and (peak_source is None or str(peak_source).strip() == ""):
        return None
    if peak_tflops is None:
        raise ValueError(
            f"--peak-source {peak_source!r} given without --peak-tflops; pass both, e.g. "
            f"--peak-tflops 989.5 --peak-source 'H100 SXM datasheet, dense BF16'"
        )
    valid = f"a positive number of TFLOP/s per device, at most {MAX_PEAK_TFLOPS:g} (e.g. 989.5)"
    if isinstance(peak_tflops, bool):
        raise ValueError(f"--peak-tflops must be {valid}, got {peak_tflops!r}")
    try:
        value = float(peak_tflops)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"--peak-tflops must be {valid}, got {peak_tflops!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--peak-tflops must be {valid}, got {peak_tflops!r}")
    if value > MAX_PEAK_TFLOPS:
        raise ValueError(f"--peak-tflops must be {valid}, got {peak_tflops!r} (FLOP/s given instead of TFLOP/s?)")
    if peak_source is None or str(peak_source).strip() == "":
        raise ValueError(
            f"--peak-tflops {peak_tflops!r} needs --peak-source TEXT saying where the figure comes from "
            f"(a datasheet, a measured matmul); got {peak_source!r}"
        )
    return value


def why_no_peak(device_name: str | None, dtype: object = "bf16") -> str | None:
    """Return why :func:`peak_flops` gives no peak (text for the UI), or ``None`` when it gives one.

    The text ends with the flags that enable MFU anyway.
    """
    enable = "pass --peak-tflops X --peak-source TEXT to declare one"
    if not device_name or str(device_name).strip().lower() in ("cpu", "none"):
        return f"no GPU: no datasheet peak; {enable}"
    try:
        canonical = normalize_dtype(dtype)
    except ValueError as exc:
        return f"{exc}; {enable}"
    row = _find(device_name)
    if row is None:
        name = " ".join(str(device_name).lower().split())
        for pattern, variants in _AMBIGUOUS:
            if re.search(pattern, name):
                return f"{device_name!r} does not say which variant it is ({variants}), whose peaks differ; {enable}"
        return f"no datasheet peak for {device_name!r} in trainmeter's table; {enable}"
    if row.peaks.get(canonical) is None:
        return f"{row.card} has no dense {canonical} tensor peak in trainmeter's table; {enable}"
    return None


def table_rows() -> tuple[tuple[str, str, dict[str, float | None], str], ...]:
    """Return the table as (card, pattern, peaks by dtype, source) rows, most specific first (for docs)."""
    return tuple((r.card, r.pattern, dict(r.peaks), r.source) for r in _TABLE)
