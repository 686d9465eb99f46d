"""What the GPU wing publishes to the others: its sampler's readings and its passport section (a frozen view)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmeter.gpu.backend import GpuDeviceInfo
    from trainmeter.gpu.sampler import GpuSampler


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

    def device_identity(self, uuid: str | None = None) -> GpuDeviceInfo | None:
        """Who the sampled device with ``uuid`` is (``GPU-`` optional, case ignored; a MIG instance's gives its parent),
        or the only one when ``uuid`` is ``None``, as NVML (or amdsmi) read it at the open: index, name, UUID, PCI
        device id (``pciDeviceId >> 16``), memory in bytes; else ``None`` (NVML opening too). Any thread."""
        from trainmeter.gpu.selection import bare_uuid

        infos = list(getattr(self.readings, "devices", {}).values())  # none while NVML opens
        if uuid is not None:  # the GPU itself, or the parent of a MIG instance on it
            key = bare_uuid(uuid)
            infos = [d for d in infos if key in (bare_uuid(d.uuid), *(bare_uuid(m) for _, m in d.mig_instances))]
        return infos[0] if len(infos) == 1 else None
