"""The real GPU backend: NVML through ``pynvml`` (PyPI ``nvidia-ml-py``), imported only by :func:`open_nvml`.

Every NVML call goes through :func:`query`, which maps NVML's errors to reasons (docs/spec.md section 8), cached per
device. GPM (Hopper+): two rotating samples per device (or per MIG GPU instance); the first tick only primes the
pair, one within 100 ms of the previous repeats its values. Thread safety: a device's state (its GPM pairs too) is
guarded by its ``lock``, held by every sample.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.gpu.backend import (
    GPM_FIELDS,
    GPM_METRICS,
    MIG_GPM_WHAT,
    REASON_DRIVER_NOT_LOADED,
    REASON_DRIVER_TOO_OLD,
    REASON_ENERGY_WHAT,
    REASON_GPM_DRIVER_TOO_OLD,
    REASON_GPM_FIRST_SAMPLE,
    REASON_GPM_NO_PERMISSION,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    REASON_MIG_GPM_NOT_SUPPORTED,
    REASON_MIG_NO_INSTANCES,
    REASON_NO_DEVICES,
    REASON_NO_PERMISSION,
    REASON_NOT_SUPPORTED,
    REASON_PYNVML_MISSING,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
    MigGpmSample,
    open_library,
    safe,
)

__all__ = ["CLOSE_LOCK_TIMEOUT_S", "NvmlBackend", "open_nvml"]

CLOSE_LOCK_TIMEOUT_S = 0.2
NVML_MEMORY_V2 = 0x02000028  # nvmlMemory_v2's version tag: nvmlDeviceGetMemoryInfo counts reserved memory apart
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0

GPM_MIN_INTERVAL_S = 0.1  # nvml.h: the interval between two GPM samples "should be greater than 100ms"

GpmResult = tuple[dict[str, float], dict[str, str], "float | None"]  # (values, reasons by field, window_s)
# why GPM is off after a permanent failure (NotSupported, FunctionNotFound, NoPermission): whole GPU, MIG instance
_GPM_FAILS = (REASON_GPM_NOT_SUPPORTED, REASON_GPM_DRIVER_TOO_OLD, REASON_GPM_NO_PERMISSION)
_MIG_GPM_FAILS = (REASON_MIG_GPM_NOT_SUPPORTED, f"{MIG_GPM_WHAT}: {REASON_GPM_DRIVER_TOO_OLD}",
                  REASON_NO_PERMISSION.format(MIG_GPM_WHAT))


def all_missing(reason: str) -> GpmResult:
    """Every GPM field ``None`` with ``reason``."""
    return {}, dict.fromkeys(GPM_FIELDS, reason), None


class GpmPair:
    """The two GPM sample buffers of one device (``handle``), used ping-pong; ``gpu_instance_id``: a MIG GPU instance
    of it (``nvmlGpmMigSampleGet``), ``None`` for the whole device."""

    def __init__(self, nv: Any, handle: Any, gpu_instance_id: int | None = None) -> None:
        self._nv = nv
        self._sample = ((lambda buf: nv.nvmlGpmSampleGet(handle, buf)) if gpu_instance_id is None
                        else (lambda buf: nv.nvmlGpmMigSampleGet(handle, gpu_instance_id, buf)))
        self._bufs: list[Any] = []
        self._struct: Any = None
        self._t_prev: float | None = None
        self._last: GpmResult = ({}, {}, None)

    def read(self, now_s: float) -> GpmResult:
        """One tick at ``now_s``; a GPM call's ``pynvml.NVMLError`` is raised for the caller to map."""
        nv = self._nv
        if not self._bufs:
            self._bufs = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            self._struct = nv.c_nvmlGpmMetricsGet_t()
        if self._t_prev is None:
            self._sample(self._bufs[0])
            self._t_prev = now_s
            return all_missing(REASON_GPM_FIRST_SAMPLE)
        window_s = now_s - self._t_prev
        if window_s < GPM_MIN_INTERVAL_S:
            return self._last
        self._sample(self._bufs[1])  # bufs[0] holds the older sample
        mg = self._struct
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRICS)
        mg.sample1, mg.sample2 = self._bufs
        for i, (metric_id, _, _) in enumerate(GPM_METRICS):
            mg.metrics[i].metricId = metric_id
            mg.metrics[i].nvmlReturn = 0
            mg.metrics[i].value = 0.0
        nv.nvmlGpmMetricsGet(mg)
        self._t_prev = now_s
        self._bufs.reverse()  # ping-pong: the newer sample is the next tick's older one
        self._last = _parse(mg, window_s)
        return self._last

    def free(self) -> None:
        """Free both buffers (the pair is dropped then: :func:`free_gpm`); never raises."""
        for buf in self._bufs:
            safe(lambda buf=buf: self._nv.nvmlGpmSampleFree(buf))


def _parse(mg: Any, window_s: float) -> GpmResult:
    values: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for i, (metric_id, fld, scale) in enumerate(GPM_METRICS):
        metric = mg.metrics[i]
        value = float(metric.value)
        if int(metric.nvmlReturn) != 0:
            reasons[fld] = REASON_NOT_SUPPORTED.format(f"GPM metric {metric_id}")
        elif not math.isfinite(value):
            reasons[fld] = f"GPM metric {metric_id} not valid for this interval"
        elif scale < 1:  # percent -> fraction, clamped
            values[fld] = min(max(value * scale, 0.0), 1.0)
        else:
            values[fld] = max(value * scale, 0.0)
    return values, reasons, window_s


class NvmlDevice:
    """Mutable per-device state; guarded by ``lock``."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.info = GpuDeviceInfo(index=index, name="", uuid="")
        self.unsupported: dict[str, str] = {}
        self.clock_max: tuple[Any, str | None] = (None, None)  # the max SM clock (static): read at the open
        self.lock = threading.Lock()
        self.lost_reason: str | None = None
        self.gpm_ok = False
        self.gpm_reason: str | None = None
        self.gpm: dict[int | None, GpmPair] = {}  # per MIG GPU instance id; None: the whole GPU
        self.mig_reason: str | None = None  # why a MIG-enabled GPU has no GPM per instance


def _lost(dev: NvmlDevice) -> GpuUnavailableError:
    dev.lost_reason = REASON_GPU_LOST
    return GpuUnavailableError(REASON_GPU_LOST, fatal=True)


def query(nv: Any, dev: NvmlDevice, key: str, what: str, *calls: tuple[Any, ...]) -> tuple[Any, str | None]:
    """``(value, None)`` from the first ``(function, *args)`` of ``calls`` the driver has (a later one: the fallback),
    else ``(None, reason)``, permanent ones cached under ``key``. ``GpuUnavailableError``: GpuIsLost (fatal) or
    Uninitialized (not fatal)."""
    cached = dev.unsupported.get(key)
    if cached is not None:
        return None, cached
    reason = REASON_NOT_SUPPORTED.format(what)
    permanent = {nv.NVML_ERROR_FUNCTION_NOT_FOUND: REASON_DRIVER_TOO_OLD,
                 nv.NVML_ERROR_NOT_SUPPORTED: REASON_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION: REASON_NO_PERMISSION}
    for fn, *args in calls:
        try:
            return fn(*args), None
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise _lost(dev) from None
            if exc.value == nv.NVML_ERROR_UNINITIALIZED:
                raise GpuUnavailableError("NVML was shut down by other code in this process", fatal=False) from None
            if exc.value not in permanent:
                return None, f"{what}: NVML error {exc}"  # transient: not cached
            reason = permanent[exc.value].format(what)
            if exc.value != nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                break  # a missing function tries the fallback
        except getattr(nv, "NVMLLibraryMismatchError", ()):  # unversioned call, old driver
            reason = REASON_DRIVER_TOO_OLD.format(what)
    dev.unsupported[key] = reason
    return None, reason


def _memory_calls(nv: Any, handle: Any) -> tuple[tuple[Any, ...], ...]:
    """The memory info call: v2 (reserved memory counted apart) where the driver has it, else v1."""
    return (nv.nvmlDeviceGetMemoryInfo, handle, NVML_MEMORY_V2), (nv.nvmlDeviceGetMemoryInfo, handle)


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
    mem, _ = query(nv, dev, "memory", "memory", *_memory_calls(nv, handle))
    pci, _ = query(nv, dev, "pci", "PCI info", (nv.nvmlDeviceGetPciInfo, handle))
    mig, _ = query(nv, dev, "mig", "MIG mode", (nv.nvmlDeviceGetMigMode, handle))
    dev.clock_max = query(nv, dev, "sm_clock_max", "max SM clock",
                          (nv.nvmlDeviceGetMaxClockInfo, handle, NVML_CLOCK_SM))
    mig_enabled = None if mig is None else bool(mig[0])
    instances: tuple[tuple[int, str], ...] = ()
    if mig_enabled:
        dev.gpm_ok, dev.gpm_reason = False, REASON_MIG
        instances, dev.mig_reason = _mig_instances(nv, dev, handle)
    else:
        support, why = query(nv, dev, "gpm_support", "GPM", (nv.nvmlGpmQueryDeviceSupport, handle))
        dev.gpm_ok = bool(support is not None and support.isSupportedDevice)
        why = why or ""
        dev.gpm_reason = (None if dev.gpm_ok else REASON_GPM_DRIVER_TOO_OLD if "too old" in why
                          else REASON_GPM_NO_PERMISSION if "no permission" in why else REASON_GPM_NOT_SUPPORTED)
    dev.info = GpuDeviceInfo(index=index, name=str(name or ""), uuid=str(uuid or ""),
                             mem_total_bytes=None if mem is None else int(mem.total), mig_enabled=mig_enabled,
                             gpm_supported=dev.gpm_ok, gpm_reason=dev.gpm_reason, mig_instances=instances,
                             pci_device_id=safe(lambda: int(pci.pciDeviceId) >> 16))  # device << 16 | vendor (0x10DE)
    return dev


def _mig_instances(nv: Any, dev: NvmlDevice, handle: Any) -> tuple[tuple[tuple[int, str], ...], str | None]:
    """``(gpu_instance_id, MIG UUID)`` of each GPU instance with a MIG device (its first compute instance's UUID),
    when the GPU gives GPM per instance; else ``()`` and why not."""
    support, why = query(nv, dev, "gpm_support", MIG_GPM_WHAT, (nv.nvmlGpmQueryDeviceSupport, handle))
    if support is None or not support.isSupportedDevice:
        return (), why if why and "not supported" not in why else REASON_MIG_GPM_NOT_SUPPORTED
    count, why = query(nv, dev, "mig_count", "MIG device count", (nv.nvmlDeviceGetMaxMigDeviceCount, handle))
    found: dict[int, str] = {}
    for slot in range(int(count or 0)):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            gi, uuid = int(nv.nvmlDeviceGetGpuInstanceId(mig)), nv.nvmlDeviceGetUUID(mig)
            found.setdefault(gi, uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        except nv.NVMLError:  # an empty slot (NotFound), or one NVML will not show
            continue
    if not found:
        return (), why or REASON_MIG_NO_INSTANCES
    return tuple(sorted(found.items())), None


def _readings(nv: Any, h: Any) -> tuple[tuple[Any, ...], ...]:
    """Each NVML read of a sample: ``(query key, what, calls with fallbacks, ((GpuSample field, convert), ...))``."""
    return (("util", "GPU-Util", ((nv.nvmlDeviceGetUtilizationRates, h),),
             (("util_gpu", lambda u: u.gpu / 100.0),)),
            ("memory", "memory", _memory_calls(nv, h),
             (("mem_used_bytes", lambda m: int(m.used)), ("mem_total_bytes", lambda m: int(m.total)))),
            ("power", "power draw", ((nv.nvmlDeviceGetPowerUsage, h),), (("power_w", lambda mw: mw / 1000.0),)),
            ("sm_clock", "SM clock", ((nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM),), (("sm_clock_mhz", float),)),
            ("temperature", "temperature", ((nv.nvmlDeviceGetTemperatureV, h, NVML_TEMPERATURE_GPU),
                                            (nv.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU)),
             (("temperature_c", float),)))


def sample_device(nv: Any, dev: NvmlDevice, now_s: float) -> GpuSample:
    """Read every field of ``dev`` at ``now_s``; an unsupported one is missing with its reason. Hold ``dev.lock``.
    ``GpuUnavailableError``: the device is lost (fatal) or NVML was shut down (not fatal)."""
    h = dev.handle
    got: dict[str, tuple[Any, str | None]] = {}  # field -> (value, or None and why)
    for key, what, calls, outs in _readings(nv, h):
        value, why = query(nv, dev, key, what, *calls)
        why = REASON_MIG if value is None and key == "util" and dev.info.mig_enabled else why
        got.update((fld, (None if value is None else convert(value), why)) for fld, convert in outs)
    clock_max, why = dev.clock_max
    got["sm_clock_max_mhz"] = (float(clock_max) if clock_max else None, why)
    gpm = _gpm(nv, dev, None, now_s, _GPM_FAILS) if dev.gpm_ok else dev.gpm_reason or REASON_GPM_NOT_SUPPORTED
    if isinstance(gpm, str):
        dev.gpm_ok, dev.gpm_reason = False, gpm
        gpm = all_missing(gpm)
    gpm_values, gpm_missing, window_s = gpm
    got.update((fld, (None, why)) for fld, why in gpm_missing.items())
    got.update((fld, (value, None)) for fld, value in gpm_values.items())
    mig_gpm, mig_reason = mig_gpm_tick(nv, dev, now_s)
    return GpuSample(index=dev.index, t_s=now_s, gpm_window_s=window_s, mig_gpm=mig_gpm, mig_gpm_reason=mig_reason,
                     unavailable=tuple((k, why or "not available") for k, (v, why) in got.items() if v is None),
                     **{k: v for k, (v, _) in got.items() if v is not None})


def _gpm(nv: Any, dev: NvmlDevice, gi: int | None, now_s: float, fails: tuple[str, str, str]) -> GpmResult | str:
    """One GPM tick of ``dev``'s pair ``gi`` (``None``: the whole GPU, else a MIG GPU instance): the result, or the
    reason in ``fails`` (NotSupported, FunctionNotFound, NoPermission) of a permanent failure, the buffers freed. A
    transient failure primes the pair again (its result says why); a lost GPU raises (fatal)."""
    pair = dev.gpm.setdefault(gi, GpmPair(nv, dev.handle, gi))
    try:
        return pair.read(now_s)
    except nv.NVMLError as exc:
        code = exc.value
    if code == nv.NVML_ERROR_GPU_IS_LOST:
        raise _lost(dev)
    permanent = (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND, nv.NVML_ERROR_NO_PERMISSION)
    if code in permanent:
        free_gpm(dev)
        return fails[permanent.index(code)]
    pair._t_prev = None  # transient: forget the older sample, the next tick primes the pair again
    return all_missing(f"GPM read failed: {nv.NVMLError(code)}")


def mig_gpm_tick(nv: Any, dev: NvmlDevice, now_s: float) -> tuple[tuple[MigGpmSample, ...], str | None]:
    """One GPM tick per MIG GPU instance of a MIG-enabled GPU, or ``()`` and why not (a lost device raises)."""
    if not dev.info.mig_enabled:
        return (), None
    out = []
    for gi, uuid in dev.info.mig_instances if dev.mig_reason is None else ():
        result = _gpm(nv, dev, gi, now_s, _MIG_GPM_FAILS)
        if isinstance(result, str):
            dev.mig_reason = result
            return (), result
        values, reasons, window_s = result
        out.append(MigGpmSample(gpu_instance_id=gi, uuid=uuid, values=values, gpm_window_s=window_s,
                                unavailable=tuple(reasons.items())))
    return (tuple(out), None) if out else ((), dev.mig_reason or REASON_MIG_NO_INSTANCES)


def free_gpm(dev: NvmlDevice) -> None:
    """Free the device's GPM sample buffers (whole GPU and per MIG GPU instance), if any."""
    for pair in dev.gpm.values():
        pair.free()
    dev.gpm.clear()


def open_nvml(*, clock: Clock | None = None, module: Any = None) -> GpuBackendResult:
    """Open NVML; never raises (no backend: the reason). ``module``: a ``pynvml``-compatible module (tests)."""
    return open_library(module, "pynvml", "NVML", missing=REASON_PYNVML_MISSING, init=lambda nv: nv.nvmlInit(),
                        make=lambda nv: NvmlBackend(nv, clock=clock or MonotonicClock()),
                        shut_down="nvmlShutdown", no_devices=REASON_NO_DEVICES, init_reason=_init_reason)


def _init_reason(nv: Any, exc: BaseException) -> str | None:
    code = getattr(exc, "value", None)
    for name, default, reason in (("NVML_ERROR_LIBRARY_NOT_FOUND", 12, REASON_LIBRARY_NOT_FOUND),
                                  ("NVML_ERROR_DRIVER_NOT_LOADED", 9, REASON_DRIVER_NOT_LOADED),
                                  ("NVML_ERROR_NO_PERMISSION", 4, "NVML refused to start (no permission)")):
        if code == getattr(nv, name, default):
            return reason
    return None


class NvmlBackend:
    """:class:`~trainmeter.gpu.backend.GpuBackend` over an initialised ``pynvml``; use :func:`open_nvml`."""

    name = "nvml"

    def __init__(self, nv: Any, *, clock: Clock) -> None:
        self._nv = nv
        self._clock = clock
        self._closed = False
        self._close_lock = threading.Lock()
        self._driver: str | None = safe(lambda: str(nv.nvmlSystemGetDriverVersion()))
        self._devices = [open_device(nv, i) for i in range(int(nv.nvmlDeviceGetCount()))]

    def device_count(self) -> int:
        return len(self._devices)

    def device_info(self, index: int) -> GpuDeviceInfo:
        return self._devices[index].info

    def driver_version(self) -> str | None:
        return self._driver

    def sample(self, index: int) -> GpuSample:
        """Raises :class:`GpuUnavailableError`: fatal when lost, unopened or closed; not when NVML was shut down."""
        dev = self._devices[index]
        unopened = (dev.info.reason or "device not opened") if dev.handle is None else dev.lost_reason
        if self._closed or unopened is not None:
            raise GpuUnavailableError("the NVML backend is closed" if self._closed else unopened, fatal=True)
        with dev.lock:
            return sample_device(self._nv, dev, self._clock())

    def total_energy_mj(self, index: int) -> tuple[float | None, str | None]:
        """Energy ``index`` used since the driver loaded (Volta+), mJ: ``(value, None)`` or ``(None, reason)``."""
        dev = self._devices[index]
        if self._closed or dev.handle is None:
            return None, dev.info.reason or "the NVML backend is closed"
        try:
            with dev.lock:
                value, why = query(self._nv, dev, "energy", REASON_ENERGY_WHAT,
                                   (self._nv.nvmlDeviceGetTotalEnergyConsumption, dev.handle))
        except GpuUnavailableError as exc:
            return None, exc.reason
        return (None, why) if value is None else (float(value), None)

    def close(self) -> None:
        """Free GPM buffers and ``nvmlShutdown``; idempotent, never raises. Waits at most ``CLOSE_LOCK_TIMEOUT_S``
        per device for a sample in progress (call it on the sampler's thread, never the training thread)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for dev in self._devices:
            # a sample stuck in a hung NVML call holds the lock: leave its GPM buffers rather than wait
            if dev.lock.acquire(timeout=CLOSE_LOCK_TIMEOUT_S):
                try:
                    free_gpm(dev)
                finally:
                    dev.lock.release()
        safe(self._nv.nvmlShutdown)
