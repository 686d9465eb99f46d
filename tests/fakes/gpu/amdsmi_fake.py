"""A scripted stand-in for the ``amdsmi`` module (no ROCm, no AMD GPU), for tests and the CPU path of checks.

:class:`FakeAmdSmi` exposes the functions :mod:`trainmeter.gpu.amdsmi_backend` calls, with the shapes amdsmi
returns (dicts of figures, ``"N/A"`` for what a GPU does not report), per device from a :class:`FakeAmdDevice`.
Faults: a function raising for one device (``fail``), a figure reading ``"N/A"`` (set it so in the device), the
init failing (``init_error``). Thread-safe enough for tests (the state is read-only after construction, except
the call counter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar


class AmdSmiLibraryException(Exception):
    """What amdsmi raises on a failed query."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeAmdDevice:
    """One fake AMD GPU: figures as amdsmi reports them (percent, W, MB, MHz, C), ``"N/A"`` where it has none."""

    market_name: str = "AMD Instinct MI300X"
    uuid: str = "d1ff0000-0000-4000-8000-000000000000"
    bdf: str = "0000:0c:00.0"
    gfx_activity: Any = 87
    umc_activity: Any = 41
    current_socket_power: Any = "N/A"
    average_socket_power: Any = 612
    power_limit: Any = 750
    vram_used_mb: Any = 150_000
    vram_total_mb: Any = 196_592
    gfx_clk_mhz: Any = 2100
    gfx_max_clk_mhz: Any = 2100
    hotspot_c: Any = 71
    edge_c: Any = "N/A"
    energy_accumulator: Any = 4_000_000
    counter_resolution_uj: Any = 15.3
    driver_version: str = "6.10.5"


@dataclass
class FakeAmdSmi:
    """Module-like fake of ``amdsmi`` over ``devices``.

    Args:
        devices: One :class:`FakeAmdDevice` per GPU.
        fail: ``{(device index, function name): message}``: that call raises :class:`AmdSmiLibraryException`.
        init_error: ``amdsmi_init`` raises this message when set.
    """

    devices: list[FakeAmdDevice] = field(default_factory=lambda: [FakeAmdDevice()])
    fail: dict[tuple[int, str], str] = field(default_factory=dict)
    init_error: str | None = None
    shut_down: int = 0
    AmdSmiInitFlags: ClassVar[Any] = SimpleNamespace(INIT_AMD_GPUS=2)
    AmdSmiClkType: ClassVar[Any] = SimpleNamespace(GFX="GFX")
    AmdSmiTemperatureType: ClassVar[Any] = SimpleNamespace(HOTSPOT="HOTSPOT", EDGE="EDGE")
    AmdSmiTemperatureMetric: ClassVar[Any] = SimpleNamespace(CURRENT="CURRENT")

    def _dev(self, handle: int, fn: str) -> FakeAmdDevice:
        message = self.fail.get((handle, fn))
        if message is not None:
            raise AmdSmiLibraryException(message)
        return self.devices[handle]

    def amdsmi_init(self, flags: Any = None) -> None:
        """Start (or raise the scripted init error)."""
        if self.init_error:
            raise AmdSmiLibraryException(self.init_error)

    def amdsmi_shut_down(self) -> None:
        """Count shutdowns."""
        self.shut_down += 1

    def amdsmi_get_processor_handles(self) -> list[int]:
        """Handles are the device indices."""
        return list(range(len(self.devices)))

    def amdsmi_get_gpu_asic_info(self, h: int) -> dict[str, Any]:
        """``market_name`` and the like."""
        return {"market_name": self._dev(h, "amdsmi_get_gpu_asic_info").market_name, "vendor_id": "0x1002"}

    def amdsmi_get_gpu_device_uuid(self, h: int) -> str:
        """The device UUID."""
        return self._dev(h, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_gpu_device_bdf(self, h: int) -> str:
        """The PCI address."""
        return self._dev(h, "amdsmi_get_gpu_device_bdf").bdf

    def amdsmi_get_gpu_driver_info(self, h: int) -> dict[str, Any]:
        """The amdgpu driver version."""
        return {"driver_name": "amdgpu", "driver_version": self._dev(h, "amdsmi_get_gpu_driver_info").driver_version}

    def amdsmi_get_gpu_activity(self, h: int) -> dict[str, Any]:
        """GFX, UMC and MM activity, percent."""
        d = self._dev(h, "amdsmi_get_gpu_activity")
        return {"gfx_activity": d.gfx_activity, "umc_activity": d.umc_activity, "mm_activity": "N/A"}

    def amdsmi_get_power_info(self, h: int) -> dict[str, Any]:
        """Socket power (current, 1 s average) and the limit, W."""
        d = self._dev(h, "amdsmi_get_power_info")
        return {"current_socket_power": d.current_socket_power, "average_socket_power": d.average_socket_power,
                "power_limit": d.power_limit}

    def amdsmi_get_gpu_vram_usage(self, h: int) -> dict[str, Any]:
        """VRAM used and total, MB."""
        d = self._dev(h, "amdsmi_get_gpu_vram_usage")
        return {"vram_used": d.vram_used_mb, "vram_total": d.vram_total_mb}

    def amdsmi_get_clock_info(self, h: int, clk_type: Any) -> dict[str, Any]:
        """The GFX clock and its maximum, MHz."""
        d = self._dev(h, "amdsmi_get_clock_info")
        return {"clk": d.gfx_clk_mhz, "max_clk": d.gfx_max_clk_mhz, "min_clk": 500}

    def amdsmi_get_temp_metric(self, h: int, sensor: Any, metric: Any) -> Any:
        """Hotspot or edge temperature, C."""
        d = self._dev(h, "amdsmi_get_temp_metric")
        return d.hotspot_c if sensor == "HOTSPOT" else d.edge_c

    def amdsmi_get_energy_count(self, h: int) -> dict[str, Any]:
        """The energy accumulator and its resolution (microjoules per tick)."""
        d = self._dev(h, "amdsmi_get_energy_count")
        return {"energy_accumulator": d.energy_accumulator, "counter_resolution": d.counter_resolution_uj}
