"""Dense tensor-core peaks per card and dtype, each with its cited source: matching a device to its row.

The rows: :mod:`trainmeter.compute.peak_table` (docs/peaks.md, the matching rules); a card or dtype the table lacks
has no peak, never a guess (docs/spec.md section 5). Pure; never imports torch. Thread-safe.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from trainmeter.compute.peak_table import AMBIGUOUS, BY_MEMORY_GIB, BY_PCI_DEVICE_ID, TABLE, CardRow
from trainmeter.core.provenance import Provenance, as_provenance, finite_number

MAX_PEAK_TFLOPS = 1e6
"""The one limit on a declared peak (docs/spec.md section 5): 1 EFLOP/s per device; a larger figure is a unit slip."""

DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8")  # dtypes with a peak column

_DTYPE_ALIASES: dict[str, str] = {
    **dict.fromkeys(("bf16", "bfloat16", "torch.bfloat16"), "bf16"),
    **dict.fromkeys(("fp16", "float16", "half", "torch.float16", "torch.half"), "fp16"), "tf32": "tf32",
    **dict.fromkeys(("fp8", "float8", "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz",
                     "torch.float8_e5m2fnuz"), "fp8")}


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakRow:
    """A dense peak in TFLOP/s per device for one ``card`` (``"declared"`` for a user's) and ``dtype`` (``"any"`` for a
    declared peak with none), its cited ``source`` and ``provenance`` (``detected`` from the table, or ``declared``)."""

    card: str
    dtype: str
    tflops: float
    source: str
    provenance: Provenance = "detected"

    @property
    def flops_per_s(self) -> float:
        """The peak in FLOP/s."""
        return self.tflops * 1e12

    def to_dict(self) -> dict[str, Any]:
        """The passport's ``peak`` (its compute section; the GPU section's ``peaks_used`` leaves out provenance)."""
        return {"tflops": self.tflops, "card": self.card, "dtype": self.dtype, "source": self.source,
                "provenance": self.provenance}

    @classmethod
    def from_dict(cls, peak: Any) -> PeakRow | None:
        """A passport's ``peak`` read back, or ``None`` when it is not a dict with a positive finite ``tflops``."""
        tflops = finite_number(peak.get("tflops")) if isinstance(peak, dict) else None
        if tflops is None or tflops <= 0:
            return None
        return cls(card=str(peak.get("card")), dtype=str(peak.get("dtype")), tflops=tflops,
                   source=str(peak.get("source")), provenance=as_provenance(peak.get("provenance")))


def normalize_dtype(dtype: object) -> str:
    """The canonical dtype name (``bf16``, ``fp16``, ``tf32``, ``fp8``) of a name or torch dtype (``ValueError``
    naming it and the valid ones)."""
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


def _normalize(device_name: object) -> str:
    return " ".join(str(device_name).lower().replace("_", " ").split())


def _row_named(card: str) -> CardRow:
    return next(r for r in TABLE if r.card == card)


def _find(device_name: object, pci_device_id: int | None = None, memory_bytes: float | None = None) -> CardRow | None:
    """The matching row: by name first; a name matching only a family is settled by PCI device id or memory."""
    name = _normalize(device_name)
    for row in TABLE:
        if re.search(row.pattern, name) and not (row.exclude and re.search(row.exclude, name)):
            return row
    if pci_device_id is not None:
        device = int(pci_device_id) >> 16 if int(pci_device_id) > 0xFFFF else int(pci_device_id)
        card = BY_PCI_DEVICE_ID.get(device)
        if card is not None:
            return _row_named(card)
    if memory_bytes:
        gib = float(memory_bytes) / 2**30
        for pattern, low, high, card in BY_MEMORY_GIB:
            if re.search(pattern, name) and low <= gib <= high:
                return _row_named(card)
    return None


def match_card(device_name: object, *, pci_device_id: int | None = None,
               memory_bytes: float | None = None) -> str | None:
    """The card an NVML or torch device name (where ambiguous, its PCI device id: NVML's ``pciDeviceId`` or the
    bare 16-bit id; or memory in bytes) matches, or ``None``."""
    row = _find(device_name, pci_device_id, memory_bytes)
    return row.card if row is not None else None


def peak_flops(device_name: str, dtype: object = "bf16", *, pci_device_id: int | None = None,
               memory_bytes: float | None = None) -> PeakRow | None:
    """The dense peak of ``device_name`` (``"NVIDIA H100 80GB HBM3"``) for ``dtype`` (a name or torch dtype;
    ``ValueError`` if unknown), or ``None`` (:func:`why_no_peak` says why); ``pci_device_id`` and ``memory_bytes``
    settle a name that does not say its variant."""
    canonical = normalize_dtype(dtype)
    row = _find(device_name, pci_device_id, memory_bytes)
    if row is None:
        return None
    value = row.peaks.get(canonical)
    if value is None:
        return None
    return PeakRow(card=row.card, dtype=canonical, tflops=value, source=row.source, provenance="detected")


def validate_peak(peak_tflops: object, peak_source: object) -> float | None:
    """The one check of ``--peak-tflops X --peak-source TEXT``: the peak in TFLOP/s per device, or ``None`` when neither
    is given; ``ValueError`` naming the value and what is valid (one without the other, or not in (0, 1e6])."""
    if peak_tflops is None and (peak_source is None or str(peak_source).strip() == ""):
        return None
    if peak_tflops is None:
        raise ValueError(
            f"--peak-source {peak_source!r} given without --peak-tflops; pass both, e.g. "
            f"--peak-tflops 989.5 --peak-source 'H100 SXM datasheet, dense BF16'"
        )
    bad = (f"--peak-tflops must be a positive number of TFLOP/s per device, at most {MAX_PEAK_TFLOPS:g} (e.g. 989.5), "
           f"got {peak_tflops!r}")
    try:
        value = float(peak_tflops)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(bad) from None
    if isinstance(peak_tflops, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(bad)
    if value > MAX_PEAK_TFLOPS:
        raise ValueError(f"{bad} (FLOP/s given instead of TFLOP/s?)")
    if peak_source is None or str(peak_source).strip() == "":
        raise ValueError(
            f"--peak-tflops {peak_tflops!r} needs --peak-source TEXT saying where the figure comes from "
            f"(a datasheet, a measured matmul); got {peak_source!r}"
        )
    return value


def why_no_peak(device_name: str | None, dtype: object = "bf16", *, pci_device_id: int | None = None,
                memory_bytes: float | None = None) -> str | None:
    """Why :func:`peak_flops` gives no peak (ending with the flags that enable MFU anyway), or ``None``."""
    enable = "pass --peak-tflops X --peak-source TEXT to declare one"
    if not device_name or str(device_name).strip().lower() in ("cpu", "none"):
        return f"no GPU: no datasheet peak; {enable}"
    try:
        canonical = normalize_dtype(dtype)
    except ValueError as exc:
        return f"{exc}; {enable}"
    row = _find(device_name, pci_device_id, memory_bytes)
    if row is None:
        name = _normalize(device_name)
        for pattern, variants in AMBIGUOUS:
            if re.search(pattern, name):
                return f"{device_name!r} does not say which variant it is ({variants}), whose peaks differ; {enable}"
        return f"no datasheet peak for {device_name!r} in trainmeter's table; {enable}"
    if row.peaks.get(canonical) is None:
        return (f"{row.card} has no dense {canonical} tensor peak in trainmeter's table (its source: "
                f"{row.source}); {enable}")
    return None


class DeviceIdentityLike(Protocol):
    """What :func:`peak_for_device` reads of a device's identity (the GPU wing's ``DeviceIdentity``)."""

    name: str
    pci_device_id: int | None
    mem_total_bytes: int | None


def peak_for_device(device_name: str, dtype: object, *, memory_bytes: float | None = None,
                    identity: DeviceIdentityLike | None = None) -> tuple[PeakRow | None, str | None]:
    """``(peak, None)`` or ``(None, reason)`` for a run's device: its torch name and memory (bytes), settled by the
    ``identity`` the GPU wing read (PCI device id, memory, NVML name), or ``None``. ``ValueError`` for an unknown
    ``dtype``."""
    pci = identity.pci_device_id if identity is not None else None
    memory = identity.mem_total_bytes if identity is not None and identity.mem_total_bytes else memory_bytes
    name = device_name or (identity.name if identity is not None else "")
    peak = peak_flops(name, dtype, pci_device_id=pci, memory_bytes=memory)
    if peak is None and identity is not None and identity.name and _find(name, pci, memory) is None:
        peak = peak_flops(identity.name, dtype, pci_device_id=pci, memory_bytes=memory)  # NVML's name may say more
    if peak is not None:
        return peak, None
    return None, why_no_peak(name, dtype, pci_device_id=pci, memory_bytes=memory)


def peak_for_run(device_name: str | None, dtype: str | None, memory_bytes: float | None = None,
                 uuid: object = None, dtype_read: object = None, *,
                 gpu: object = None) -> tuple[PeakRow | None, str | None, bool]:
    """:func:`peak_for_device` for a run's device (``None``: the CPU) and dtype (``None``: one without a tensor-core
    peak, ``dtype_read`` named), its identity read by ``uuid`` through the GPU wing's view ``gpu``: ``(peak, reason,
    waiting)``, ``waiting`` while NVML still opens (a later report matches again)."""
    if device_name is None:
        return None, ("the model is on the CPU: there is no dense datasheet peak to divide by; pass "
                      "--peak-tflops X --peak-source TEXT to declare one"), False
    if dtype is None:
        return None, f"dtype {dtype_read} has no tensor-core peak; pass --peak-tflops X --peak-source TEXT", False
    read = getattr(gpu, "device_identity", None)
    identity = read(None if uuid is None else str(uuid)) if read is not None else None
    peak, reason = peak_for_device(device_name, dtype, memory_bytes=memory_bytes, identity=identity)
    opening = getattr(gpu, "opening", None)
    waiting = peak is None and identity is None and read is not None and bool(opening is not None and opening())
    return peak, reason, waiting
