"""Which GPUs to watch: ``--gpus all | 0,1 | GPU-<uuid>,...`` or, by default, the CUDA context's devices.

CUDA devices map to NVML devices by UUID; the default and MIG instances: docs/spec.md section 8. Pure functions
except :func:`cuda_context_uuids`; thread-safe.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainmeter.core.provenance import Provenance
from trainmeter.gpu.backend import GpuDeviceInfo

_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]{4,}$")
VALID_GPUS_TEXT = "valid: 'all', device indices such as '0,1', or UUIDs such as 'GPU-8f1c2d3e-...'"
MIG_NOTE = (
    "NVML gives no GPU-Util for a MIG-enabled GPU; trainmeter reads GPM per MIG GPU instance on the parent "
    "GPU where the device gives it, so select the parent GPU (a CUDA context on a MIG instance NVML lists "
    "selects its parent)")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpusSpec:
    """A parsed ``--gpus`` value: ``all``, or NVML indices (int) and UUIDs (``GPU-...``) in the order given."""

    all: bool = False
    entries: tuple[int | str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSelection:
    """The devices to sample (NVML indices, ascending) and how they were chosen: ``declared`` (--gpus), ``detected``
    (CUDA context, UUIDs) or ``assumed`` (every device, or index order guessed), in one sentence, with caveats."""

    indices: tuple[int, ...]
    provenance: Provenance
    how: str
    notes: tuple[str, ...] = ()


def parse_gpus(value: str | int | Sequence[int | str] | None) -> GpusSpec | None:
    """Parse ``--gpus`` / ``tm.monitor(gpus=...)``: ``"all"``, ``"0,1"``, ``"GPU-<uuid>,..."``, an int or a sequence
    of ints/UUIDs; ``None`` for the default selection. ``ValueError`` naming the bad value and what is valid."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"--gpus: {value!r} is not valid; {VALID_GPUS_TEXT}")
    if isinstance(value, int):
        parts: list[Any] = [value]
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() == "all":
            return GpusSpec(all=True)
        parts = [p.strip() for p in text.split(",")]
    else:
        parts = list(value)
    if not parts:
        raise ValueError(f"--gpus: {value!r} names no device; {VALID_GPUS_TEXT}")
    return GpusSpec(entries=tuple(dict.fromkeys(_parse_entry(part, value) for part in parts)))  # each once, in order


def _parse_entry(part: Any, whole: Any) -> int | str:
    if isinstance(part, bool):
        raise ValueError(f"--gpus: {part!r} in {whole!r} is not valid; {VALID_GPUS_TEXT}")
    if isinstance(part, int):
        if part < 0:
            raise ValueError(f"--gpus: index {part} in {whole!r} is negative; {VALID_GPUS_TEXT}")
        return part
    text = str(part).strip()
    if text.isdigit():
        return int(text)
    if text.upper().startswith("MIG-"):
        raise ValueError(f"--gpus: {text!r} is a MIG instance; {MIG_NOTE}; {VALID_GPUS_TEXT}")
    if _UUID_RE.match(text):
        return "GPU-" + text[4:].lower()
    raise ValueError(f"--gpus: {text!r} in {whole!r} is neither a device index nor a GPU UUID; {VALID_GPUS_TEXT}")


def select_gpus(spec: GpusSpec | None, devices: Sequence[GpuDeviceInfo], *, cuda_uuids: Sequence[str] | None = None,
                env: Mapping[str, str] | None = None) -> GpuSelection:
    """Resolve a :func:`parse_gpus` spec (``None``: the default, from ``cuda_uuids`` of the CUDA context's devices or
    ``env``'s ``CUDA_VISIBLE_DEVICES``) against every NVML device; ``ValueError`` listing the valid ones."""
    env = os.environ if env is None else env
    if spec is not None:
        return _declared(spec, devices)
    if cuda_uuids:
        found, notes = _by_uuid(cuda_uuids, devices)
        how = "the GPUs this process's CUDA context uses, matched to NVML by UUID"
        return _finish(found, "detected", how, notes, devices)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return _from_cvd(cvd, env.get("CUDA_DEVICE_ORDER", ""), devices)
    how = "every NVML device (this process uses no CUDA device yet)"
    return _finish([d.index for d in devices], "assumed", how, [], devices)


def _declared(spec: GpusSpec, devices: Sequence[GpuDeviceInfo]) -> GpuSelection:
    if spec.all:
        return _finish([d.index for d in devices], "declared", "every NVML device (--gpus all)", [], devices)
    found: list[int] = []
    for entry in spec.entries:
        matches = _match(entry, devices)
        if len(matches) != 1:
            many = "several GPUs" if matches else "no GPU"
            what = f"there is no GPU {entry}" if isinstance(entry, int) else f"{entry!r} matches {many}"
            raise ValueError(f"--gpus: {what}; {_valid_here(devices)}")
        found.append(matches[0])
    return _finish(found, "declared", "the GPUs named by --gpus", [], devices)


def _valid_here(devices: Sequence[GpuDeviceInfo]) -> str:
    if not devices:
        return "this machine has no NVML GPU"
    uuids = ", ".join(d.uuid for d in devices if d.uuid)
    return f"valid here: 'all', indices 0-{len(devices) - 1}" + (f", or UUIDs {uuids}" if uuids else "")


def _match(entry: int | str, devices: Sequence[GpuDeviceInfo]) -> list[int]:
    """The devices ``entry`` names: an NVML index, else a UUID exactly, else by prefix (as nvidia-smi and CUDA)."""
    if isinstance(entry, int):
        return [d.index for d in devices if d.index == entry]
    key = entry.lower()
    exact = [d.index for d in devices if d.uuid.lower() == key]
    return exact or [d.index for d in devices if d.uuid and d.uuid.lower().startswith(key)]


def _by_uuid(uuids: Sequence[str], devices: Sequence[GpuDeviceInfo]) -> tuple[list[int], list[str]]:
    found: list[int] = []
    notes: list[str] = []
    for uuid in uuids:
        if uuid.upper().startswith("MIG-"):
            notes.append(_mig_selected(uuid, devices, found) or f"CUDA device {uuid} is a MIG instance; {MIG_NOTE}")
            continue
        matches = _match(uuid, devices)
        if len(matches) == 1:
            found.append(matches[0])
        else:  # torch prints a MIG device's UUID without its MIG- prefix
            notes.append(_mig_selected(uuid, devices, found)
                         or f"CUDA device {uuid} is not among the NVML devices; its counters are not read")
    return found, notes


def bare_uuid(uuid: str) -> str:
    """A UUID without its ``GPU-`` / ``MIG-`` prefix, lower-cased (torch prints CUDA UUIDs without one)."""
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith(("gpu-", "mig-")) else text


def _mig_selected(uuid: str, devices: Sequence[GpuDeviceInfo], found: list[int]) -> str | None:
    """Select the parent GPU of MIG instance ``uuid`` (by the instances NVML lists on it); the note, or ``None``."""
    key = bare_uuid(uuid)
    for d in devices:
        for gi, mig_uuid in d.mig_instances:
            if bare_uuid(mig_uuid) == key:
                found.append(d.index)
                return (f"CUDA device {uuid} is MIG GPU instance {gi} of GPU {d.index}: GPU {d.index} is sampled, "
                        "its GPM read per GPU instance; its power and energy are the whole GPU's, shared by "
                        "every instance")
    return None


def _from_cvd(cvd: str, order: str, devices: Sequence[GpuDeviceInfo]) -> GpuSelection:
    found: list[int] = []
    notes: list[str] = []
    guessed = False
    for raw in cvd.split(","):
        item = raw.strip()
        if item.upper().startswith("MIG-"):
            notes.append(_mig_selected(item, devices, found)
                         or f"CUDA_VISIBLE_DEVICES names MIG instance {item}; {MIG_NOTE}")
            continue
        uuid = item.upper().startswith("GPU-")
        matches = _match(item if uuid else int(item), devices) if uuid or item.isdigit() else []
        if len(matches) != 1:
            break  # CUDA stops at the first invalid entry too
        found.append(matches[0])
        guessed = guessed or (item.isdigit() and order.upper() != "PCI_BUS_ID")
    if guessed:
        notes.append(
            "CUDA_VISIBLE_DEVICES holds indices; assumed CUDA order equals NVML order "
            "(set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs to make it exact)"
        )
    if not found and not notes:
        notes.append(f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU from CUDA")
    how = "the GPUs named by CUDA_VISIBLE_DEVICES (no CUDA context in this process yet)"
    return _finish(found, "assumed" if guessed else "detected", how, notes, devices)


def _finish(found: Sequence[int], provenance: Provenance, how: str, notes: list[str],
            devices: Sequence[GpuDeviceInfo]) -> GpuSelection:
    indices = tuple(sorted(set(found)))
    notes += [f"GPU {d.index} is in MIG mode; {MIG_NOTE}" for d in sorted(devices, key=lambda d: d.index)
              if d.index in indices and d.mig_enabled]
    return GpuSelection(indices=indices, provenance=provenance, how=how, notes=tuple(notes))


def cuda_context_uuids(modules: Mapping[str, Any] | None = None) -> list[str] | None:
    """UUIDs (``GPU-...``), in CUDA ordinal order, of the current device and every device whose caching allocator
    holds memory; ``None`` when torch is not imported (``modules``: ``sys.modules``), CUDA not initialised, or
    anything fails. Never imports torch, initialises CUDA, syncs or raises."""
    torch = (modules if modules is not None else sys.modules).get("torch")
    try:
        cuda = torch.cuda  # AttributeError without torch
        if not cuda.is_initialized():
            return None
        used = {int(cuda.current_device())} | {i for i in range(int(cuda.device_count())) if cuda.memory_reserved(i)}
        texts = [str(cuda.get_device_properties(i).uuid) for i in sorted(used)]
        return [text if text[:4].upper() in ("GPU-", "MIG-") else "GPU-" + text for text in texts]
    except Exception:  # noqa: BLE001 - detection must never raise into training code
        return None
