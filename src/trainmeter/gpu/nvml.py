"""The real GPU backend: NVML through ``pynvml`` (PyPI ``nvidia-ml-py``).

This is the ONLY module that imports ``pynvml``, and only inside :func:`open_nvml`.
Every NVML call goes through :meth:`NvmlBackend._query`, which maps NotSupported,
FunctionNotFound, NoPermission and ``NVMLLibraryMismatchError`` to ``None`` plus a reason
(cached, so an unsupported call is not retried every tick) and GpuIsLost to a fatal
:class:`~trainmeter.gpu.backend.GpuUnavailableError`.

GPM (Hopper+) lives in :mod:`trainmeter.gpu.nvml_gpm` (two rotating samples per device;
MiB/s ids converted to bytes/s); this module maps its errors.

Thread safety: NVML is thread-safe; per-device state (GPM buffers) is guarded by a
per-device lock, so :meth:`NvmlBackend.sample` may run concurrently for different devices.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.gpu.backend import (
    REASON_DRIVER_NOT_LOADED,
    REASON_ENERGY_WHAT,
    REASON_GPM_DRIVER_TOO_OLD,
    REASON_GPM_NO_PERMISSION,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    REASON_NO_DEVICES,
    REASON_PROCESS_NOT_LISTED,
    REASON_PYNVML_MISSING,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
    reason_driver_too_old,
    reason_no_permission,
    reason_not_supported,
    throttle_reason_names,
)
from trainmeter.gpu.nvml_gpm import GpmPair, GpmResult, all_missing

_NVML_CLOCK_SM = 1
CLOSE_LOCK_TIMEOUT_S = 0.2
_NVML_TEMPERATURE_GPU = 0
_NVML_MEMORY_V2 = 0x02000028


def open_nvml(
    *, clock: Clock | None = None, pids: Iterable[int] | None = None, module: Any = None
) -> GpuBackendResult:
    """Open NVML; never raises.

    Args:
        clock: Clock for sample timestamps and GPM intervals (default monotonic).
        pids: Processes whose GPU memory counts as "this process" (default: own pid).
        module: A ``pynvml``-compatible module (tests); default imports ``pynvml``.

    Returns:
        A result holding an :class:`NvmlBackend`, or ``backend=None`` and the reason
        (nvidia-ml-py missing, library not found, driver not loaded, no devices, ...).
    """
    nv = module
    if nv is None:
        try:
            nv = importlib.import_module("pynvml")
        except ImportError:
            return GpuBackendResult(backend=None, reason=REASON_PYNVML_MISSING)
    try:
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - every init failure becomes a reason
        return GpuBackendResult(backend=None, reason=_init_reason(nv, exc))
    try:
        backend = NvmlBackend(nv, clock=clock or MonotonicClock(), pids=pids)
    except Exception as exc:  # noqa: BLE001
        _swallow(nv.nvmlShutdown)
        return GpuBackendResult(backend=None, reason=f"NVML started but listing GPUs failed: {exc}")
    if backend.device_count() == 0:
        backend.close()
        return GpuBackendResult(backend=None, reason=REASON_NO_DEVICES)
    return GpuBackendResult(backend=backend)


def _init_reason(nv: Any, exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    if code == getattr(nv, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return REASON_LIBRARY_NOT_FOUND
    if code == getattr(nv, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return REASON_DRIVER_NOT_LOADED
    if code == getattr(nv, "NVML_ERROR_NO_PERMISSION", 4):
        return "NVML refused to start (no permission)"
    return f"NVML could not start: {type(exc).__name__}: {exc}"


def _swallow(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001, S110 - cleanup must never raise
        pass


class _Device:
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


class NvmlBackend:
    """:class:`~trainmeter.gpu.backend.GpuBackend` over ``pynvml``; use :func:`open_nvml`.

    Args:
        nv: The ``pynvml`` module, already initialised (``nvmlInit`` succeeded).
        clock: Clock for timestamps and GPM intervals.
        pids: Processes whose GPU memory counts as this process's.
    """

    def __init__(self, nv: Any, *, clock: Clock, pids: Iterable[int] | None = None) -> None:
        self._nv = nv
        self._clock = clock
        self._pids = frozenset(pids) if pids is not None else frozenset({os.getpid()})
        self._closed = False
        self._close_lock = threading.Lock()
        self._driver: str | None = None
        try:
            self._driver = str(nv.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            self._driver = None
        count = int(nv.nvmlDeviceGetCount())
        self._devices = [self._open_device(i) for i in range(count)]

    # --- GpuBackend -----------------------------------------------------------------------

    def device_count(self) -> int:
        """Number of NVML devices (including ones we may not open)."""
        return len(self._devices)

    def device_info(self, index: int) -> GpuDeviceInfo:
        """Static facts about NVML device ``index``."""
        return self._devices[index].info

    def driver_version(self) -> str | None:
        """NVIDIA driver version, e.g. ``"595.45.04"``."""
        return self._driver

    def sample(self, index: int) -> GpuSample:
        """Read device ``index``; unsupported readings are ``None`` with a reason.

        Raises:
            GpuUnavailableError: The device is lost (fatal), unopenable (fatal), the backend
                is closed (fatal) or NVML was shut down by other code (not fatal).
        """
        dev = self._devices[index]
        if self._closed:
            raise GpuUnavailableError("the NVML backend is closed", fatal=True)
        if dev.handle is None:
            raise GpuUnavailableError(dev.info.reason or "device not opened", fatal=True)
        if dev.lost_reason is not None:
            raise GpuUnavailableError(dev.lost_reason, fatal=True)
        with dev.lock:
            return self._sample_locked(dev)

    def total_energy_mj(self, index: int) -> tuple[float | None, str | None]:
        """Energy device ``index`` used since the driver loaded, millijoules; never raises.

        ``nvmlDeviceGetTotalEnergyConsumption`` (Volta and newer). Returns ``(value, None)``
        or ``(None, reason)``; an unsupported counter's reason is cached like any query.
        """
        dev = self._devices[index]
        if self._closed or dev.handle is None:
            return None, dev.info.reason or "the NVML backend is closed"
        try:
            with dev.lock:
                value, why = self._query(dev, "energy", REASON_ENERGY_WHAT,
                                         (self._nv.nvmlDeviceGetTotalEnergyConsumption, dev.handle))
        except GpuUnavailableError as exc:
            return None, exc.reason
        return (None, why) if value is None else (float(value), None)

    def close(self) -> None:
        """Free GPM buffers and release NVML (``nvmlShutdown``). Idempotent; never raises.

        Waits at most ``CLOSE_LOCK_TIMEOUT_S`` per device for a sample in progress.
        Call it on the sampler's own thread (the training thread never does).
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for dev in self._devices:
            # a sample stuck in a hung NVML call holds the lock: leave its GPM buffers rather than wait
            if dev.lock.acquire(timeout=CLOSE_LOCK_TIMEOUT_S):
                try:
                    self._free_gpm(dev)
                finally:
                    dev.lock.release()
        _swallow(self._nv.nvmlShutdown)

    # --- the choke point ------------------------------------------------------------------

    def _query(self, dev: _Device, key: str, what: str, *calls: tuple[Any, ...]) -> tuple[Any, str | None]:
        """Run the first NVML call of ``calls`` the driver has; map errors to a reason.

        Each entry of ``calls`` is ``(function, *args)``; a later entry is a fallback used
        when the driver lacks the earlier one's symbol. Returns ``(value, None)`` or
        ``(None, reason)``. Permanent failures are cached per device under ``key``.

        Raises:
            GpuUnavailableError: GpuIsLost (fatal) or Uninitialized (not fatal).
        """
        nv = self._nv
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

    # --- device opening -------------------------------------------------------------------

    def _open_device(self, index: int) -> _Device:
        nv = self._nv
        dev = _Device(index)
        handle, reason = self._query(dev, "handle", f"GPU {index}", (nv.nvmlDeviceGetHandleByIndex, index))
        if handle is None:
            dev.info = GpuDeviceInfo(index=index, name="", uuid="", reason=reason)
            return dev
        dev.handle = handle
        name, _ = self._query(dev, "name", "name", (nv.nvmlDeviceGetName, handle))
        uuid, _ = self._query(dev, "uuid", "UUID", (nv.nvmlDeviceGetUUID, handle))
        mem, _ = self._query(
            dev,
            "memory",
            "memory",
            (nv.nvmlDeviceGetMemoryInfo, handle, _NVML_MEMORY_V2),
            (nv.nvmlDeviceGetMemoryInfo, handle),
        )
        pci, _ = self._query(dev, "pci", "PCI info", (nv.nvmlDeviceGetPciInfo, handle))
        mig, _ = self._query(dev, "mig", "MIG mode", (nv.nvmlDeviceGetMigMode, handle))
        mig_enabled = None if mig is None else bool(mig[0])
        if mig_enabled:
            dev.gpm_ok, dev.gpm_reason = False, REASON_MIG
        else:
            support, why = self._query(dev, "gpm_support", "GPM", (nv.nvmlGpmQueryDeviceSupport, handle))
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
        )
        return dev

    # --- sampling -------------------------------------------------------------------------

    def _sample_locked(self, dev: _Device) -> GpuSample:
        nv, h = self._nv, dev.handle
        now_s = self._clock()
        values: dict[str, Any] = {}
        missing: dict[str, str] = {}

        def put(fld: str, value: Any, reason: str | None) -> None:
            if value is None:
                missing[fld] = reason or "not available"
            else:
                values[fld] = value

        util, why = self._query(dev, "util", "GPU-Util", (nv.nvmlDeviceGetUtilizationRates, h))
        if util is None and dev.info.mig_enabled:
            why = REASON_MIG
        put("util_gpu", None if util is None else util.gpu / 100.0, why)
        mem, why = self._query(
            dev,
            "memory",
            "memory",
            (nv.nvmlDeviceGetMemoryInfo, h, _NVML_MEMORY_V2),
            (nv.nvmlDeviceGetMemoryInfo, h),
        )
        put("mem_used_bytes", None if mem is None else int(mem.used), why)
        put("mem_total_bytes", None if mem is None else int(mem.total), why)
        power, why = self._query(dev, "power", "power draw", (nv.nvmlDeviceGetPowerUsage, h))
        put("power_w", None if power is None else power / 1000.0, why)
        limit, why = self._query(dev, "power_limit", "power limit", (nv.nvmlDeviceGetEnforcedPowerLimit, h))
        put("power_limit_w", None if limit is None else limit / 1000.0, why)
        clock, why = self._query(dev, "sm_clock", "SM clock", (nv.nvmlDeviceGetClockInfo, h, _NVML_CLOCK_SM))
        put("sm_clock_mhz", None if clock is None else float(clock), why)
        if "sm_clock_max" not in dev.cached:
            dev.cached["sm_clock_max"] = self._query(
                dev, "sm_clock_max", "max SM clock", (nv.nvmlDeviceGetMaxClockInfo, h, _NVML_CLOCK_SM)
            )
        clock_max, why = dev.cached["sm_clock_max"]
        put("sm_clock_max_mhz", None if not clock_max else float(clock_max), why)
        temp, why = self._query(
            dev,
            "temperature",
            "temperature",
            (nv.nvmlDeviceGetTemperatureV, h, _NVML_TEMPERATURE_GPU),
            (nv.nvmlDeviceGetTemperature, h, _NVML_TEMPERATURE_GPU),
        )
        put("temperature_c", None if temp is None else float(temp), why)
        mask, why = self._query(
            dev,
            "throttle",
            "clock-event reasons",
            (nv.nvmlDeviceGetCurrentClocksEventReasons, h),
            (nv.nvmlDeviceGetCurrentClocksThrottleReasons, h),
        )
        put("throttle_reasons", None if mask is None else throttle_reason_names(int(mask)), why)
        self._process_memory(dev, put)
        gpm_values, gpm_missing, window_s = self._gpm(dev, now_s)
        values.update(gpm_values)
        missing.update(gpm_missing)
        return GpuSample(
            index=dev.index,
            t_s=now_s,
            gpm_window_s=window_s,
            unavailable=tuple((k, v) for k, v in missing.items() if values.get(k) is None),
            **{k: v for k, v in values.items() if v is not None},
        )

    def _process_memory(self, dev: _Device, put: Callable[[str, Any, str | None], None]) -> None:
        nv = self._nv
        procs, why = self._query(
            dev, "processes", "process list", (nv.nvmlDeviceGetComputeRunningProcesses, dev.handle)
        )
        if procs is None:
            put("process_mem_bytes", None, why)
            return
        mine = [p for p in procs if int(p.pid) in self._pids]
        used = [int(p.usedGpuMemory) for p in mine if p.usedGpuMemory is not None]
        if not mine:
            put("process_mem_bytes", None, REASON_PROCESS_NOT_LISTED)
        elif not used:
            put("process_mem_bytes", None, "NVML reports per-process memory as N/A here")
        else:
            put("process_mem_bytes", sum(used), None)

    def _gpm(self, dev: _Device, now_s: float) -> GpmResult:
        """One GPM tick: (values, reasons, window_s); errors mapped to reasons."""
        if not dev.gpm_ok:
            return all_missing(dev.gpm_reason or REASON_GPM_NOT_SUPPORTED)
        nv = self._nv
        if dev.gpm is None:
            dev.gpm = GpmPair(nv, dev.handle)
        try:
            return dev.gpm.read(now_s)
        except nv.NVMLError as exc:
            code = exc.value
        permanent = {
            nv.NVML_ERROR_NOT_SUPPORTED: REASON_GPM_NOT_SUPPORTED,
            nv.NVML_ERROR_FUNCTION_NOT_FOUND: REASON_GPM_DRIVER_TOO_OLD,
            nv.NVML_ERROR_NO_PERMISSION: REASON_GPM_NO_PERMISSION,
        }
        if code == nv.NVML_ERROR_GPU_IS_LOST:
            dev.lost_reason = REASON_GPU_LOST
            raise GpuUnavailableError(REASON_GPU_LOST, fatal=True)
        if code in permanent:
            dev.gpm_ok, dev.gpm_reason = False, permanent[code]
            self._free_gpm(dev)
            return all_missing(permanent[code])
        dev.gpm.restart()  # transient: prime the pair again next tick
        return all_missing(f"GPM read failed: {nv.NVMLError(code)}")

    def _free_gpm(self, dev: _Device) -> None:
        if dev.gpm is not None:
            dev.gpm.free()
            dev.gpm = None


def _gpm_reason(why: str | None) -> str:
    if why is None:
        return REASON_GPM_NOT_SUPPORTED
    if "too old" in why:
        return REASON_GPM_DRIVER_TOO_OLD
    if "no permission" in why:
        return REASON_GPM_NO_PERMISSION
    return REASON_GPM_NOT_SUPPORTED


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
