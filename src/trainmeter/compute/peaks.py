"""Dense tensor-core peaks per card and dtype, each with its cited source: matching a device to its row.

The rows: :mod:`trainmeter.compute.peak_table` (docs/peaks.md, the matching rules); a card or dtype the table lacks
has no peak, never a guess (docs/spec.md section 5). Pure; never imports torch. Thread-safe.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from trainmeter.compute.peak_table import (
    AMBIGUOUS,
    BY_MEMORY_GIB,
    BY_PCI_DEVICE_ID,
    MIG_NAME,
    TABLE,
    VGPU_NAME,
    CardRow,
)
from trainmeter.core.provenance import Provenance, as_provenance, finite_number

MAX_PEAK_TFLOPS = 1e6
PEAK_FLAGS = "--peak-tflops X --peak-source TEXT"
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
    """The matching row: by name (a MIG instance's without its MIG suffix; a vGPU profile's: none) first; a name
    matching only a family is settled by PCI device id or memory."""
    name = re.sub(MIG_NAME, "", _normalize(device_name))
    if re.search(VGPU_NAME, name):
        return None
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


def _lookup(device_name: object, dtype: object, pci_device_id: int | None = None, memory_bytes: float | None = None,
            sm_count: int | None = None, nvml_name: str | None = None) -> tuple[PeakRow | None, str | None]:
    """``(peak, None)`` or ``(None, reason)``: the row of ``device_name`` (else of ``nvml_name``), times the device's
    share of the card's SMs where it reads fewer (``sm_count``: torch's ``multi_processor_count``; docs/spec.md
    section 5, "A share of a card"). ``ValueError`` for an unknown ``dtype``."""
    enable = f"pass {PEAK_FLAGS} to declare one"
    if not device_name or str(device_name).strip().lower() in ("cpu", "none"):
        return None, f"no GPU: no datasheet peak; {enable}"
    canonical = normalize_dtype(dtype)
    name = _normalize(device_name)
    if re.search(VGPU_NAME, name):
        return None, (f"{device_name!r} is a vGPU profile: the share of the card it is given (time slices, or a MIG "
                      f"slice under the hypervisor) cannot be read inside the VM, and the whole card's peak would "
                      f"overstate it; {enable} (or measure the ceiling with tm.calibrate())")
    row = _find(name, pci_device_id, memory_bytes) or (_find(nvml_name, pci_device_id, memory_bytes)
                                                       if nvml_name else None)
    if row is None:
        for pattern, variants in AMBIGUOUS:
            if re.search(pattern, name):
                return None, (f"{device_name!r} does not say which variant it is ({variants}), whose peaks differ; "
                              f"{enable}")
        return None, f"no datasheet peak for {device_name!r} in trainmeter's table; {enable}"
    value = row.peaks.get(canonical)
    if value is None:
        return None, (f"{row.card} has no dense {canonical} tensor peak in trainmeter's table (its source: "
                      f"{row.source}); {enable}")
    mig = re.search(MIG_NAME, name)
    if mig and not (sm_count and row.sms):
        missing = "the instance's SM count was not read" if row.sms else f"the {row.card}'s SM count is not in the table"
        return None, (f"{device_name!r} is a MIG instance and its share of the card cannot be read ({missing}); the "
                      f"whole card's peak would overstate it; {enable}")
    peak = PeakRow(card=row.card, dtype=canonical, tflops=value, source=row.source)
    if sm_count and row.sms and sm_count < row.sms:  # a MIG instance, an AMD compute partition, an MPS limit
        part = mig.group().strip().replace("mig", "MIG") if mig else "a partition"
        share = f"{sm_count} of the card's {row.sms} {row.sm_word}"
        peak = PeakRow(card=f"{row.card}, {part} ({share})", dtype=canonical, tflops=value * sm_count / row.sms,
                       source=f"{share} (torch multi_processor_count on this device / the card's full count) x the "
                              f"card's dense {value:g}: {row.source}")
    return peak, None


def peak_flops(device_name: str, dtype: object = "bf16", *, pci_device_id: int | None = None,
               memory_bytes: float | None = None, sm_count: int | None = None) -> PeakRow | None:
    """The dense peak of ``device_name`` (``"NVIDIA H100 80GB HBM3"``) for ``dtype`` (a name or torch dtype;
    ``ValueError`` if unknown), or ``None`` (:func:`why_no_peak` says why); ``pci_device_id`` and ``memory_bytes``
    settle a name that does not say its variant; ``sm_count`` (torch's ``multi_processor_count``) gives a MIG
    instance's or a partition's share of the card (a MIG instance without it: ``None``)."""
    return _lookup(device_name, dtype, pci_device_id, memory_bytes, sm_count)[0]


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
                memory_bytes: float | None = None, sm_count: int | None = None) -> str | None:
    """Why :func:`peak_flops` gives no peak (ending with the flags that enable MFU anyway), or ``None``."""
    try:
        return _lookup(device_name, dtype, pci_device_id, memory_bytes, sm_count)[1]
    except ValueError as exc:
        return f"{exc}; pass {PEAK_FLAGS} to declare one"


class DeviceIdentityLike(Protocol):
    """What :func:`peak_for_device` reads of a device's identity (the GPU wing's ``GpuDeviceInfo``)."""

    name: str
    pci_device_id: int | None
    mem_total_bytes: int | None


def peak_for_device(device_name: str, dtype: object, *, memory_bytes: float | None = None,
                    identity: DeviceIdentityLike | None = None,
                    sm_count: int | None = None) -> tuple[PeakRow | None, str | None]:
    """``(peak, None)`` or ``(None, reason)`` for a run's device: its torch name, memory (bytes) and SM count, settled
    by the ``identity`` the GPU wing read (PCI device id, memory, NVML name), or ``None``. ``ValueError`` for an
    unknown ``dtype``."""
    pci = identity.pci_device_id if identity is not None else None
    memory = identity.mem_total_bytes if identity is not None and identity.mem_total_bytes else memory_bytes
    name = device_name or (identity.name if identity is not None else "")
    nvml_name = identity.name if identity is not None else None  # NVML's name may say more
    return _lookup(name, dtype, pci, memory, sm_count, nvml_name)


def peak_for_run(device_name: str | None, dtype: str | None, memory_bytes: float | None = None,
                 uuid: object = None, dtype_read: object = None, sm_count: int | None = None, *,
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
    peak, reason = peak_for_device(device_name, dtype, memory_bytes=memory_bytes, identity=identity, sm_count=sm_count)
    opening = getattr(gpu, "opening", None)
    waiting = peak is None and identity is None and read is not None and bool(opening is not None and opening())
    return peak, reason, waiting
