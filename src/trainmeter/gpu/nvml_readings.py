"""One NVML sample of one device: utilisation, memory, power, clocks, temperature, throttling, GPM (per MIG instance).

Every call goes through :func:`trainmeter.gpu.nvml_device.query`; GPM (Hopper+) reads
come from :mod:`trainmeter.gpu.nvml_gpm` (two rotating samples per device), its errors
mapped here. The caller holds the device's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
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
    REASON_PROCESS_NOT_LISTED,
    GpuSample,
    MigGpmSample,
    GpuUnavailableError,
    reason_no_permission,
    throttle_reason_names,
)
from trainmeter.gpu.nvml_device import NvmlDevice, query, query_memory
from trainmeter.gpu.nvml_gpm import GpmPair, GpmResult, all_missing

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


def sample_device(nv: Any, dev: NvmlDevice, now_s: float, pids: Collection[int]) -> GpuSample:
    """Read every field of ``dev`` at ``now_s``; an unsupported one is missing with its reason.

    Raises:
        GpuUnavailableError: The device is lost (fatal) or NVML was shut down (not fatal).
    """
    h = dev.handle
    values: dict[str, Any] = {}
    missing: dict[str, str] = {}

    def put(fld: str, value: Any, reason: str | None) -> None:
        if value is None:
            missing[fld] = reason or "not available"
        else:
            values[fld] = value

    util, why = query(nv, dev, "util", "GPU-Util", (nv.nvmlDeviceGetUtilizationRates, h))
    if util is None and dev.info.mig_enabled:
        why = REASON_MIG
    put("util_gpu", None if util is None else util.gpu / 100.0, why)
    put("mem_activity", None if util is None else util.memory / 100.0, why)
    mem, why = query_memory(nv, dev, h)
    put("mem_used_bytes", None if mem is None else int(mem.used), why)
    put("mem_total_bytes", None if mem is None else int(mem.total), why)
    power, why = query(nv, dev, "power", "power draw", (nv.nvmlDeviceGetPowerUsage, h))
    put("power_w", None if power is None else power / 1000.0, why)
    limit, why = query(nv, dev, "power_limit", "power limit", (nv.nvmlDeviceGetEnforcedPowerLimit, h))
    put("power_limit_w", None if limit is None else limit / 1000.0, why)
    clock, why = query(nv, dev, "sm_clock", "SM clock", (nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM))
    put("sm_clock_mhz", None if clock is None else float(clock), why)
    if "sm_clock_max" not in dev.cached:
        dev.cached["sm_clock_max"] = query(
            nv, dev, "sm_clock_max", "max SM clock", (nv.nvmlDeviceGetMaxClockInfo, h, NVML_CLOCK_SM)
        )
    clock_max, why = dev.cached["sm_clock_max"]
    put("sm_clock_max_mhz", None if not clock_max else float(clock_max), why)
    temp, why = query(
        nv,
        dev,
        "temperature",
        "temperature",
        (nv.nvmlDeviceGetTemperatureV, h, NVML_TEMPERATURE_GPU),
        (nv.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU),
    )
    put("temperature_c", None if temp is None else float(temp), why)
    mask, why = query(
        nv,
        dev,
        "throttle",
        "clock-event reasons",
        (nv.nvmlDeviceGetCurrentClocksEventReasons, h),
        (nv.nvmlDeviceGetCurrentClocksThrottleReasons, h),
    )
    put("throttle_reasons", None if mask is None else throttle_reason_names(int(mask)), why)
    _process_memory(nv, dev, pids, put)
    gpm_values, gpm_missing, window_s = gpm_tick(nv, dev, now_s)
    values.update(gpm_values)
    missing.update(gpm_missing)
    mig_gpm, mig_reason = mig_gpm_tick(nv, dev, now_s)
    return GpuSample(
        index=dev.index,
        t_s=now_s,
        gpm_window_s=window_s,
        mig_gpm=mig_gpm,
        mig_gpm_reason=mig_reason,
        unavailable=tuple((k, v) for k, v in missing.items() if values.get(k) is None),
        **{k: v for k, v in values.items() if v is not None},
    )


def _process_memory(nv: Any, dev: NvmlDevice, pids: Collection[int],
                    put: Callable[[str, Any, str | None], None]) -> None:
    procs, why = query(nv, dev, "processes", "process list", (nv.nvmlDeviceGetComputeRunningProcesses, dev.handle))
    if procs is None:
        put("process_mem_bytes", None, why)
        return
    mine = [p for p in procs if int(p.pid) in pids]
    used = [int(p.usedGpuMemory) for p in mine if p.usedGpuMemory is not None]
    if not mine:
        put("process_mem_bytes", None, REASON_PROCESS_NOT_LISTED)
    elif not used:
        put("process_mem_bytes", None, "NVML reports per-process memory as N/A here")
    else:
        put("process_mem_bytes", sum(used), None)


def gpm_tick(nv: Any, dev: NvmlDevice, now_s: float) -> GpmResult:
    """One GPM tick: (values, reasons, window_s); errors mapped to reasons.

    Raises:
        GpuUnavailableError: The device is lost (fatal).
    """
    if not dev.gpm_ok:
        return all_missing(dev.gpm_reason or REASON_GPM_NOT_SUPPORTED)
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
        free_gpm(dev)
        return all_missing(permanent[code])
    dev.gpm.restart()  # transient: prime the pair again next tick
    return all_missing(f"GPM read failed: {nv.NVMLError(code)}")


def mig_gpm_tick(nv: Any, dev: NvmlDevice, now_s: float) -> tuple[tuple[MigGpmSample, ...], str | None]:
    """One GPM tick per MIG GPU instance of a MIG-enabled GPU (``nvmlGpmMigSampleGet``), or ``()`` and why not.

    Raises:
        GpuUnavailableError: The device is lost (fatal).
    """
    if not dev.info.mig_enabled:
        return (), None
    if dev.mig_reason is not None or not dev.info.mig_instances:
        return (), dev.mig_reason or REASON_MIG_NO_INSTANCES
    permanent = {
        nv.NVML_ERROR_NOT_SUPPORTED: REASON_MIG_GPM_NOT_SUPPORTED,
        nv.NVML_ERROR_FUNCTION_NOT_FOUND: f"{MIG_GPM_WHAT}: {REASON_GPM_DRIVER_TOO_OLD}",
        nv.NVML_ERROR_NO_PERMISSION: reason_no_permission(MIG_GPM_WHAT),
    }
    out = []
    for gi, uuid in dev.info.mig_instances:
        pair = dev.mig_gpm.get(gi)
        if pair is None:
            pair = dev.mig_gpm[gi] = GpmPair(nv, dev.handle, gi)
        try:
            values, reasons, window_s = pair.read(now_s)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                dev.lost_reason = REASON_GPU_LOST
                raise GpuUnavailableError(REASON_GPU_LOST, fatal=True) from None
            if exc.value in permanent:
                dev.mig_reason = permanent[exc.value]
                free_gpm(dev)
                return (), dev.mig_reason
            pair.restart()  # transient: prime this instance's pair again next tick
            values, reasons, window_s = all_missing(f"GPM read failed: {nv.NVMLError(exc.value)}")
        out.append(MigGpmSample(gpu_instance_id=gi, uuid=uuid, values=values, gpm_window_s=window_s,
                                unavailable=tuple(reasons.items())))
    return tuple(out), None


def free_gpm(dev: NvmlDevice) -> None:
    """Free the device's GPM sample buffers (whole GPU and per MIG GPU instance), if any."""
    if dev.gpm is not None:
        dev.gpm.free()
        dev.gpm = None
    for pair in dev.mig_gpm.values():
        pair.free()
    dev.mig_gpm.clear()
