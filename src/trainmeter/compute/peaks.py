"""Dense tensor-core peaks per card and dtype, each with its cited source: the table and matching a device to its row.

The rows are data, in ``peak_table.json`` beside this module (docs/peaks.md is generated from them, with the matching
rules); the dense peak is derived (quoted / 2 for a 2:4-sparse figure); rows are tried in order, most specific first.
A card or dtype the table lacks has no peak, never a guess (docs/spec.md section 5). Pure, thread-safe; no torch.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.core.provenance import Provenance, as_provenance, finite_number


@dataclass(frozen=True, slots=True)
class CardRow:
    """One card: its short name (``"H100 SXM"``), a regex searched in the normalized device name (``exclude``: one that
    rules the row out), TFLOP/s per dtype as the ``source`` quotes them (``sparse_quoted``: 2:4-sparse, dense = / 2)
    and ``secondary``: a page other than the vendor's is cited; ``sms``: the whole card's SM count (CUs on AMD,
    ``sm_word``), or ``None`` where the table lacks it."""

    card: str
    pattern: str
    exclude: str | None
    quoted: dict[str, float | None]
    sparse_quoted: bool
    source: str
    secondary: bool = False
    sms: int | None = None
    sm_word: str = "SMs"

    @property
    def peaks(self) -> dict[str, float | None]:
        """Dense TFLOP/s per dtype: the quoted figure, halved when the source quotes it with sparsity."""
        div = 2.0 if self.sparse_quoted else 1.0
        return {k: (None if v is None else v / div) for k, v in self.quoted.items()}


_DATA = json.loads((Path(__file__).parent / "peak_table.json").read_text(encoding="utf-8"))

TABLE: tuple[CardRow, ...] = tuple(
    CardRow(card=r["card"], pattern=r["pattern"], exclude=r.get("exclude"), quoted=r["quoted"],
            sparse_quoted=r["sparse"], source=r["source"].format_map(_DATA["notes"]),
            secondary=r.get("secondary", False), sms=r.get("sms") or r.get("cus"),
            sm_word="CUs" if "cus" in r else "SMs")
    for r in _DATA["rows"])
"""The table, most specific first: the first row whose pattern matches (and whose exclusion does not) wins."""

AMBIGUOUS: tuple[tuple[str, str], ...] = tuple(map(tuple, _DATA["ambiguous"]))
"""Names that match a family but not a variant: no peak from the name alone, and the reason says so."""

BY_PCI_DEVICE_ID: dict[int, str] = {int(key, 16): card for key, card in _DATA["by_pci_device_id"].items()}
"""PCI device ids (``nvmlDeviceGetPciInfo().pciDeviceId >> 16``) that settle an ambiguous name, to the card; the
ids are NVIDIA's own (open-gpu-kernel-modules README, "Compatible GPUs": 2330 "NVIDIA H100 80GB HBM3", 2331
"NVIDIA H100 PCIe", 2321 "NVIDIA H100 NVL"; 2324 "NVIDIA H800" is its only H800 id not named PCIe (2322) or NVL
(233A), and an NCCL issue log shows H800 SXM5 devices named "NVIDIA H800"). Its 2339 "NVIDIA H100" says no
variant and settles nothing."""

BY_MEMORY_GIB: tuple[tuple[str, float, float, str], ...] = tuple(map(tuple, _DATA["by_memory_gib"]))
"""(family pattern, lowest GiB, highest GiB, card): a memory size that settles an ambiguous name. H100 NVL (94 GB)
reads about 93.6 GiB in NVML (95830 MiB) and a little less in torch; the 80 GB parts read 79.6 GiB."""


MIG_NAME: str = _DATA["mig_name"]
"""The MIG suffix of a device name (``"NVIDIA A100-SXM4-40GB MIG 3g.20gb"``): the card is matched without it."""

VGPU_NAME: str = _DATA["vgpu_name"]
"""A vGPU profile's name (``"NVIDIA A10-4Q"``, ``"GRID A100-40C"``): its share of the card cannot be read."""

MAX_PEAK_TFLOPS = 1e6  # the one limit on a declared peak (spec section 5): 1 EFLOP/s per device, more is a unit slip
PEAK_FLAGS = "--peak-tflops X --peak-source TEXT"

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
    hint = (" (float32 matmuls run on tensor cores only as TF32, when torch.backends.cuda.matmul.allow_tf32 or "
            "set_float32_matmul_precision('high') allows it; pass 'tf32' then)"
            if key in ("fp32", "float32", "float", "torch.float32", "torch.float") else "")
    raise ValueError(f"unknown dtype {dtype!r} for a peak; valid: {', '.join(DTYPES)} "
                     f"(or torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2){hint}")


def _normalize(device_name: object) -> str:
    return " ".join(str(device_name).lower().replace("_", " ").split())


def _find(device_name: object, pci_device_id: int | None = None, memory_bytes: float | None = None) -> CardRow | None:
    """The matching row: by name (a MIG instance's without its MIG suffix; a vGPU profile's: none) first; a name
    matching only a family is settled by PCI device id or memory."""
    name = re.sub(MIG_NAME, "", _normalize(device_name))
    if re.search(VGPU_NAME, name):
        return None
    for row in TABLE:
        if re.search(row.pattern, name) and not (row.exclude and re.search(row.exclude, name)):
            return row
    pci = None if pci_device_id is None else int(pci_device_id)
    card = None if pci is None else BY_PCI_DEVICE_ID.get(pci >> 16 if pci > 0xFFFF else pci)
    if card is None and memory_bytes:
        gib = float(memory_bytes) / 2**30
        card = next((c for pattern, low, high, c in BY_MEMORY_GIB if re.search(pattern, name) and low <= gib <= high),
                    None)
    return next((r for r in TABLE if r.card == card), None)


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
    ``ValueError`` if unknown), or ``None`` (``_lookup`` says why); ``pci_device_id`` and ``memory_bytes`` settle
    a name that does not say its variant; ``sm_count`` (torch's ``multi_processor_count``) gives a MIG
    instance's or a partition's share of the card (a MIG instance without it: ``None``)."""
    return _lookup(device_name, dtype, pci_device_id, memory_bytes, sm_count)[0]


def validate_peak(peak_tflops: object, peak_source: object) -> float | None:
    """The one check of ``--peak-tflops X --peak-source TEXT``: the peak in TFLOP/s per device, or ``None`` when neither
    is given; ``ValueError`` naming the value and what is valid (one without the other, or not in (0, 1e6])."""
    no_source = peak_source is None or str(peak_source).strip() == ""
    if peak_tflops is None and no_source:
        return None
    if peak_tflops is None:
        raise ValueError(f"--peak-source {peak_source!r} given without --peak-tflops; pass both, e.g. "
                         f"--peak-tflops 989.5 --peak-source 'H100 SXM datasheet, dense BF16'")
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
    if no_source:
        raise ValueError(f"--peak-tflops {peak_tflops!r} needs --peak-source TEXT saying where the figure comes from "
                         f"(a datasheet, a measured matmul); got {peak_source!r}")
    return value


def peak_for_run(device_name: str | None, dtype: str | None, memory_bytes: float | None = None,
                 uuid: object = None, dtype_read: object = None, sm_count: int | None = None, *,
                 gpu: object = None) -> tuple[PeakRow | None, str | None, bool]:
    """The peak of a run's device (``None``: the CPU; its torch name, memory in bytes and SM count) and dtype (``None``:
    one without a tensor-core peak, ``dtype_read`` named), settled by the identity the GPU wing's view ``gpu`` read for
    ``uuid`` (its ``DeviceIdentity``: PCI device id, memory, NVML name): ``(peak, reason, waiting)``, ``waiting`` while
    NVML still opens (a later report matches again). ``ValueError`` for an unknown ``dtype``."""
    if device_name is None:
        return None, ("the model is on the CPU: there is no dense datasheet peak to divide by; pass "
                      "--peak-tflops X --peak-source TEXT to declare one"), False
    if dtype is None:
        return None, f"dtype {dtype_read} has no tensor-core peak; pass --peak-tflops X --peak-source TEXT", False
    read = getattr(gpu, "device_identity", None)
    identity = read(None if uuid is None else str(uuid)) if read is not None else None
    if identity is not None:  # NVML's name may say more; its memory reads the whole card
        memory_bytes = identity.mem_total_bytes or memory_bytes
        device_name = device_name or identity.name
    peak, reason = _lookup(device_name, dtype, getattr(identity, "pci_device_id", None), memory_bytes, sm_count,
                           getattr(identity, "name", None))
    opening = getattr(gpu, "opening", None)
    waiting = peak is None and identity is None and read is not None and bool(opening is not None and opening())
    return peak, reason, waiting
