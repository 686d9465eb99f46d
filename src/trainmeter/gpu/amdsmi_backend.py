"""The AMD GPU backend: ``amdsmi`` (ROCm's SMI library, imported only by :func:`open_amdsmi`) behind the seam.

What it reads and what AMD does not expose: docs/spec.md section 8, "AMD". Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.gpu.backend import (
    GPM_FIELDS,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
    open_library,
    safe,
)

REASON_AMDSMI_MISSING = ("the amdsmi package (ROCm's Python SMI bindings) is not installed; install the one "
                         "that ships with ROCm (pip install amdsmi matching the ROCm version)")
REASON_AMD_NO_ACTIVITY = ("AMD does not expose SM, tensor-pipe (matrix core) or DRAM-bandwidth activity through "
                          "amdsmi (only rocprofiler counters have them); the ladder stops at GFX activity (plus MFU)")
REASON_AMD_NO_DEVICES = "amdsmi sees no AMD GPU on this machine"
_MIB = 1024 * 1024
LADDER_SOURCES = {"gpu_util": "amdsmi gfx_activity (share of time the GFX engine was busy)"}  # the ladder's text


# (what, amdsmi function, ((GpuSample field, key in its answer, scale, label), ...)); the clock's takes GFX
_READS = (
    ("GFX activity", "amdsmi_get_gpu_activity", (("util_gpu", "gfx_activity", 0.01, "GFX activity"),)),
    ("power", "amdsmi_get_power_info", (("power_w", "current_socket_power", 1.0, "power"),)),
    ("memory", "amdsmi_get_gpu_vram_usage",
     (("mem_used_bytes", "vram_used", _MIB, "VRAM used"), ("mem_total_bytes", "vram_total", _MIB, "VRAM total"))),
    ("GFX clock", "amdsmi_get_clock_info",
     (("sm_clock_mhz", "clk", 1.0, "GFX clock"), ("sm_clock_max_mhz", "max_clk", 1.0, "GFX clock maximum"))))


def open_amdsmi(*, clock: Clock | None = None, module: Any = None) -> GpuBackendResult:
    """Open amdsmi (``module``: an ``amdsmi``-compatible one, for tests); never raises (no backend: the reason)."""
    return open_library(module, "amdsmi", "amdsmi", missing=REASON_AMDSMI_MISSING, init=_init,
                        make=lambda lib: AmdSmiBackend(lib, clock=clock or MonotonicClock()),
                        shut_down="amdsmi_shut_down", no_devices=REASON_AMD_NO_DEVICES)


def _init(lib: Any) -> None:
    flags = getattr(getattr(lib, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
    lib.amdsmi_init(flags) if flags is not None else lib.amdsmi_init()


def _number(value: Any) -> float | None:
    """A reported figure as a float, or ``None`` for ``"N/A"`` and the like."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, dict):
        value = value.get("value")
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None


class AmdSmiBackend:
    """:class:`~trainmeter.gpu.backend.GpuBackend` over ``amdsmi``; use :func:`open_amdsmi`."""

    name = "amdsmi"

    def __init__(self, lib: Any, *, clock: Clock) -> None:
        self._lib = lib
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._handles = list(lib.amdsmi_get_processor_handles())

    def device_count(self) -> int:
        return len(self._handles)

    def driver_version(self) -> str | None:
        info = safe(lambda: self._lib.amdsmi_get_gpu_driver_info(self._handles[0])) if self._handles else None
        version = info.get("driver_version") if isinstance(info, dict) else None
        return str(version) if version else None

    def _call(self, what: str, fn: str, *args: Any) -> tuple[Any, str | None]:
        try:
            return getattr(self._lib, fn)(*args), None
        except Exception as exc:  # noqa: BLE001 - a field failing is a reason, never a raise
            return None, f"{what}: amdsmi {fn} failed ({type(exc).__name__}: {exc})"

    def device_info(self, index: int) -> GpuDeviceInfo:
        """Name (ASIC market name, as torch shows it under ROCm), UUID, VRAM; never raises."""
        h = self._handles[index]
        asic, why = self._call("name", "amdsmi_get_gpu_asic_info", h)
        if asic is None:
            return GpuDeviceInfo(index=index, name="", uuid="", reason=why)
        name = str(asic.get("market_name") or "")
        uuid, _ = self._call("uuid", "amdsmi_get_gpu_device_uuid", h)
        vram, _ = self._call("memory", "amdsmi_get_gpu_vram_usage", h)
        total = _number(vram.get("vram_total")) if isinstance(vram, dict) else None
        return GpuDeviceInfo(index=index, name=name, uuid=str(uuid or ""),
                             mem_total_bytes=int(total * _MIB) if total is not None else None,
                             gpm_reason=REASON_AMD_NO_ACTIVITY)

    def sample(self, index: int) -> GpuSample:
        """Fields AMD lacks are ``None`` with the reason; :class:`GpuUnavailableError` when closed or mute."""
        if self._closed:
            raise GpuUnavailableError("the amdsmi backend is closed", fatal=True)
        h = self._handles[index]
        values: dict[str, Any] = {}
        missing: dict[str, str] = dict.fromkeys(GPM_FIELDS, REASON_AMD_NO_ACTIVITY)
        clock_type = getattr(getattr(self._lib, "AmdSmiClkType", None), "GFX", "GFX")
        answered, why = False, None
        for what, fn, wanted in _READS:
            got, why = self._call(what, fn, *((h, clock_type) if fn == "amdsmi_get_clock_info" else (h,)))
            if not isinstance(got, dict):
                missing.update(dict.fromkeys((f for f, *_ in wanted), why or f"{what}: not read"))
                continue
            answered = True
            for fld, key, scale, label in wanted:
                raw = got.get(key)
                if key == "current_socket_power" and not _number(raw):  # else the 1 s average
                    raw = got.get("average_socket_power")
                if (value := _number(raw)) is None:
                    missing[fld] = f"{label}: not reported by this GPU (N/A)"
                else:
                    values[fld] = int(value * scale) if fld.endswith("_bytes") else value * scale
        temp, why_temp = self._temperature(h)
        if temp is not None:
            answered, values["temperature_c"] = True, temp
        else:
            missing["temperature_c"] = why_temp  # type: ignore[assignment]
        if not answered:
            raise GpuUnavailableError(f"the AMD GPU {index} answered no amdsmi query: {why}", fatal=False)
        unavailable = tuple((k, v) for k, v in missing.items() if k not in values)
        return GpuSample(index=index, t_s=self._clock(), unavailable=unavailable, **values)

    def _temperature(self, h: Any) -> tuple[float | None, str | None]:
        types = getattr(self._lib, "AmdSmiTemperatureType", None)
        metric = getattr(getattr(self._lib, "AmdSmiTemperatureMetric", None), "CURRENT", "CURRENT")
        for sensor in ("HOTSPOT", "EDGE"):
            value, reason = self._call("temperature", "amdsmi_get_temp_metric", h,
                                       getattr(types, sensor, sensor), metric)
            if _number(value) is not None:
                return _number(value), None
        return None, reason or "temperature: not reported by this GPU (N/A)"

    def total_energy_mj(self, index: int) -> tuple[float | None, str | None]:
        """The energy accumulator x its resolution (microjoules), in mJ; never raises."""
        info, why = self._call("energy counter", "amdsmi_get_energy_count", self._handles[index])
        if not isinstance(info, dict):
            return None, why or "energy counter: not read"
        ticks = _number(info.get("energy_accumulator", info.get("power")))
        resolution_uj = _number(info.get("counter_resolution"))
        if ticks is None or resolution_uj is None:
            return None, "energy counter: not reported by this GPU (N/A)"
        return ticks * resolution_uj / 1000.0, None

    def close(self) -> None:
        """Shut amdsmi down once; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        safe(self._lib.amdsmi_shut_down)
