"""One NVML device's state and the choke point every NVML call goes through (errors mapped to reasons).

:func:`query` maps NotSupported, FunctionNotFound, NoPermission and
``NVMLLibraryMismatchError`` to ``None`` plus a reason (cached per device, so an
unsupported call is not retried every tick) and GpuIsLost to a fatal
:class:`~trainmeter.gpu.backend.GpuUnavailableError`. :func:`open_device` reads a
device's static facts at open. The ``pynvml`` module is passed in (only
:mod:`trainmeter.gpu.nvml` imports it).

Thread safety: a device's mutable state is guarded by its ``lock``; callers hold it
around :func:`query` once the device is shared with sampling threads.
"""

from __future__ import annotations

import threading
from typing import Any

from trainmeter.gpu.backend import (
    REASON_GPM_DRIVER_TOO_OLD,
    REASON_GPM_NO_PERMISSION,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    MIG_GPM_WHAT,
    REASON_MIG,
    REASON_MIG_GPM_NOT_SUPPORTED,
    REASON_MIG_NO_INSTANCES,
    GpuDeviceInfo,
    GpuUnavailableError,
    reason_driver_too_old,
    reason_no_permission,
    reason_not_supported,
)
from trainmeter.gpu.nvml_gpm import GpmPair

NVML_MEMORY_V2 = 0x02000028
"""``nvmlMemory_v2`` version tag (``nvmlDeviceGetMemoryInfo`` with it counts reserved memory apart)."""


class NvmlDevice:
    """Mutable per-device state; guarded by ``lock``."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.info = GpuDeviceInfo(index=index, name="", uuid="")
        self.unsupported: dict[str, str] = {}
        self.cached: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.lost_reason: str | None = None
        self.gpm_ok = False
        self.gpm_reason: str | None = None
        self.gpm: GpmPair | None = None
        self.mig_gpm: dict[int, GpmPair] = {}  # per MIG GPU instance id
        self.mig_reason: str | None = None  # why a MIG-enabled GPU has no GPM per instance


def query(nv: Any, dev: NvmlDevice, key: str, what: str, *calls: tuple[Any, ...]) -> tuple[Any, str | None]:
    """Run the first NVML call of ``calls`` the driver has; map errors to a reason.

    Each entry of ``calls`` is ``(function, *args)``; a later entry is a fallback used
    when the driver lacks the earlier one's symbol. Returns ``(value, None)`` or
    ``(None, reason)``. Permanent failures are cached per device under ``key``.

    Raises:
        GpuUnavailableError: GpuIsLost (fatal) or Uninitialized (not fatal).
    """
    cached = dev.unsupported.get(key)
    if cached is not None:
        return None, cached
    reason = reason_not_supported(what)
    for fn, *args in calls:
        try:
            return fn(*args), None
        except nv.NVMLError as exc:
            code = exc.value
            if code == nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                reason = reason_driver_too_old(what)
                continue
            if code == nv.NVML_ERROR_NOT_SUPPORTED:
                reason = reason_not_supported(what)
            elif code == nv.NVML_ERROR_NO_PERMISSION:
                reason = reason_no_permission(what)
            elif code == nv.NVML_ERROR_GPU_IS_LOST:
                dev.lost_reason = REASON_GPU_LOST
                raise GpuUnavailableError(REASON_GPU_LOST, fatal=True) from None
            elif code == nv.NVML_ERROR_UNINITIALIZED:
                raise GpuUnavailableError(
                    "NVML was shut down by other code in this process", fatal=False
                ) from None
            else:
                return None, f"{what}: NVML error {exc}"  # transient: not cached
            break
        except getattr(nv, "NVMLLibraryMismatchError", ()):  # unversioned call, old driver
            reason = reason_driver_too_old(what)
            continue
    dev.unsupported[key] = reason
    return None, reason


def query_memory(nv: Any, dev: NvmlDevice, handle: Any) -> tuple[Any, str | None]:
    """The device's memory info (v2 where the driver has it, else v1) and why it is missing, through :func:`query`."""
    return query(nv, dev, "memory", "memory", (nv.nvmlDeviceGetMemoryInfo, handle, NVML_MEMORY_V2),
                 (nv.nvmlDeviceGetMemoryInfo, handle))


def open_device(nv: Any, index: int) -> NvmlDevice:
    """Open NVML device ``index`` and read its static facts (a device NVML refuses keeps the reason)."""
    dev = NvmlDevice(index)
    handle, reason = query(nv, dev, "handle", f"GPU {index}", (nv.nvmlDeviceGetHandleByIndex, index))
    if handle is None:
        dev.info = GpuDeviceInfo(index=index, name="", uuid="", reason=reason)
        return dev
    dev.handle = handle
    name, _ = query(nv, dev, "name", "name", (nv.nvmlDeviceGetName, handle))
    uuid, _ = query(nv, dev, "uuid", "UUID", (nv.nvmlDeviceGetUUID, handle))
    mem, _ = query_memory(nv, dev, handle)
    pci, _ = query(nv, dev, "pci", "PCI info", (nv.nvmlDeviceGetPciInfo, handle))
    mig, _ = query(nv, dev, "mig", "MIG mode", (nv.nvmlDeviceGetMigMode, handle))
    mig_enabled = None if mig is None else bool(mig[0])
    instances: tuple[tuple[int, str], ...] = ()
    if mig_enabled:
        dev.gpm_ok, dev.gpm_reason = False, REASON_MIG
        instances, dev.mig_reason = _mig_instances(nv, dev, handle)
    else:
        support, why = query(nv, dev, "gpm_support", "GPM", (nv.nvmlGpmQueryDeviceSupport, handle))
        dev.gpm_ok = bool(support is not None and support.isSupportedDevice)
        dev.gpm_reason = None if dev.gpm_ok else _gpm_reason(why)
    dev.info = GpuDeviceInfo(
        index=index,
        name=str(name or ""),
        uuid=str(uuid or ""),
        mem_total_bytes=None if mem is None else int(mem.total),
        mig_enabled=mig_enabled,
        gpm_supported=dev.gpm_ok,
        gpm_reason=dev.gpm_reason,
        pci_bus_id=None if pci is None else _text(pci.busId),
        pci_device_id=_device_id(pci),
        mig_instances=instances,
    )
    return dev


def _mig_instances(nv: Any, dev: NvmlDevice, handle: Any) -> tuple[tuple[tuple[int, str], ...], str | None]:
    """``(gpu_instance_id, MIG UUID)`` of each GPU instance with a MIG device, when the GPU gives GPM per
    instance; else ``()`` and why not. One entry per GPU instance (its first compute instance's UUID)."""
    support, why = query(nv, dev, "gpm_support", MIG_GPM_WHAT, (nv.nvmlGpmQueryDeviceSupport, handle))
    if support is None or not support.isSupportedDevice:
        return (), why if why and "not supported" not in why else REASON_MIG_GPM_NOT_SUPPORTED
    count, why = query(nv, dev, "mig_count", "MIG device count", (nv.nvmlDeviceGetMaxMigDeviceCount, handle))
    found: dict[int, str] = {}
    for slot in range(int(count or 0)):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            found.setdefault(int(nv.nvmlDeviceGetGpuInstanceId(mig)), _text(nv.nvmlDeviceGetUUID(mig)))
        except nv.NVMLError:  # an empty slot (NotFound), or one NVML will not show
            continue
    if not found:
        return (), why or REASON_MIG_NO_INSTANCES
    return tuple(sorted(found.items())), None


def _gpm_reason(why: str | None) -> str:
    if why is None:
        return REASON_GPM_NOT_SUPPORTED
    if "too old" in why:
        return REASON_GPM_DRIVER_TOO_OLD
    if "no permission" in why:
        return REASON_GPM_NO_PERMISSION
    return REASON_GPM_NOT_SUPPORTED


def _device_id(pci: Any) -> int | None:
    """The PCI device id: ``pciDeviceId`` is ``device << 16 | vendor`` (0x10DE); ``None`` when unreadable."""
    try:
        return int(pci.pciDeviceId) >> 16 if pci is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
