"""What the GPU wing publishes to the others: its sampler's readings and its passport section (a frozen view)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmeter.gpu.sampler import GpuSampler


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceIdentity:
    """Who a sampled device is, as NVML (or amdsmi) read it at the open: NVML index, product name and UUID (``""``
    if unreadable), PCI device id (``pciDeviceId >> 16``, e.g. ``0x2330``) and memory in bytes (or ``None``)."""

    index: int
    name: str
    uuid: str
    pci_device_id: int | None = None
    mem_total_bytes: int | None = None


@dataclass(frozen=True)
class GpuView:
    """The GPU wing at the time of asking: the sampler's ``readings`` (``None`` before it started or with the wing
    off; NVML opens on its thread, which also reads the energy counters at the open and before the close: its
    ``unavailable_reason``, ``devices``, ``indices``, ``latest()``, ``window_averages()`` and ``energy_*`` are the
    readings other wings use, from any thread), and the last ``gpu`` passport ``section`` built (``None`` before)."""

    readings: GpuSampler | None = None
    section: Mapping[str, Any] | None = None

    def opening(self) -> bool:
        """NVML is still being opened on the sampler's thread (no device known yet)."""
        from trainmeter.gpu.sampler import REASON_OPENING

        return self.readings is not None and self.readings.unavailable_reason == REASON_OPENING

    def device_identity(self, uuid: str | None = None) -> DeviceIdentity | None:
        """The identity of the sampled device with ``uuid`` (``GPU-`` optional, case ignored; a MIG instance's gives
        its parent), or of the only one when ``uuid`` is ``None``; else ``None`` (NVML opening too). Any thread."""
        from trainmeter.gpu.selection import bare_uuid

        devices = dict(getattr(self.readings, "devices", None) or {}) if self.readings is not None else {}
        infos = [d for d in devices.values() if getattr(d, "uuid", None) is not None]
        if uuid is not None:  # the GPU itself, or the parent of a MIG instance on it
            key = bare_uuid(uuid)
            infos = [d for d in infos if bare_uuid(d.uuid) == key
                     or any(bare_uuid(m) == key for _, m in getattr(d, "mig_instances", ()))]
        if len(infos) != 1:
            return None
        d = infos[0]
        return DeviceIdentity(index=int(d.index), name=str(d.name or ""), uuid=str(d.uuid or ""),
                              pci_device_id=getattr(d, "pci_device_id", None),
                              mem_total_bytes=getattr(d, "mem_total_bytes", None))
