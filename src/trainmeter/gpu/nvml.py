"""The real GPU backend: NVML through ``pynvml`` (PyPI ``nvidia-ml-py``), imported only by :func:`open_nvml`.

Every call goes through :func:`trainmeter.gpu.nvml_device.query` (docs/spec.md section 8). Thread-safe: a
per-device lock guards its GPM buffers.
"""

from __future__ import annotations

import threading
from typing import Any

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.gpu.backend import (
    REASON_DRIVER_NOT_LOADED,
    REASON_ENERGY_WHAT,
    REASON_LIBRARY_NOT_FOUND,
    REASON_NO_DEVICES,
    REASON_PYNVML_MISSING,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
    open_library,
    safe,
)
from trainmeter.gpu.nvml_device import free_gpm, open_device, query, sample_device

__all__ = ["CLOSE_LOCK_TIMEOUT_S", "NvmlBackend", "open_nvml"]

CLOSE_LOCK_TIMEOUT_S = 0.2


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
        count = int(nv.nvmlDeviceGetCount())
        self._devices = [open_device(nv, i) for i in range(count)]

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
