"""Device profiles and level timelines for the fake GPU backend (:mod:`tests.fakes.gpu.fake`).

Profiles carry static facts (name, memory, power limit, max SM clock, GPM, MIG and its GPU instance ids:
``h100_mig`` without GPM, ``h100_mig_gpm`` with GPM per instance). A device
follows a timeline of :class:`Phase` objects, each holding :class:`Levels` (fractions 0-1,
bytes, bytes/s, W, MHz, C). Presets: :data:`IDLE`, :data:`GEMM`, :data:`LYING_GPU_UTIL`
(GPU-Util 100% with SM activity 5%, docs/spec.md section 8) and :data:`DATALOADER_STALL`; :data:`FAULTED_COUNTERS` (profiling counters at 0 under GPU-Util 100%
after a fault); :data:`CROSSCHECK_CASES` script the formula-vs-hardware causes. Immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceProfile:
    """Static facts of a fake device model (units in the names)."""

    key: str
    name: str
    mem_total_bytes: int
    sm_clock_max_mhz: float
    gpm: bool
    mig: bool = False
    pci_device_id: int | None = None
    mig_instances: tuple[int, ...] = ()


PROFILES: dict[str, DeviceProfile] = {
    "h100_sxm": DeviceProfile(
        key="h100_sxm",
        name="NVIDIA H100 80GB HBM3",
        mem_total_bytes=80 * GIB,
        sm_clock_max_mhz=1980.0,
        gpm=True,
        pci_device_id=0x2330,
    ),
    "h200": DeviceProfile(
        key="h200",
        name="NVIDIA H200",
        mem_total_bytes=141 * GIB,
        sm_clock_max_mhz=1980.0,
        gpm=True,
        pci_device_id=0x2335,
    ),
    "a100": DeviceProfile(
        key="a100",
        name="NVIDIA A100-SXM4-40GB",
        mem_total_bytes=40 * GIB,
        sm_clock_max_mhz=1410.0,
        gpm=False,
        pci_device_id=0x20B0,
    ),
    "t4": DeviceProfile(
        key="t4",
        name="Tesla T4",
        mem_total_bytes=15 * GIB,
        sm_clock_max_mhz=1590.0,
        gpm=False,
    ),
    "h100_mig": DeviceProfile(
        key="h100_mig",
        name="NVIDIA H100 80GB HBM3",
        mem_total_bytes=80 * GIB,
        sm_clock_max_mhz=1980.0,
        gpm=False,
        mig=True,
        pci_device_id=0x2330,
    ),
}
# the same MIG-enabled H100 whose driver serves GPM per GPU instance (two instances set up)
PROFILES["h100_mig_gpm"] = replace(PROFILES["h100_mig"], key="h100_mig_gpm", gpm=True, mig_instances=(1, 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class Levels:
    """Target readings during a phase (fractions 0-1, bytes, bytes/s, W, MHz, C)."""

    util_gpu: float = 0.0
    sm_activity: float = 0.0
    sm_occupancy: float = 0.0
    tensor_activity: float = 0.0
    hmma_activity: float = 0.0
    dram_bw_util: float = 0.0
    pcie_tx_bytes_per_s: float = 0.0
    pcie_rx_bytes_per_s: float = 0.0
    nvlink_tx_bytes_per_s: float = 0.0
    nvlink_rx_bytes_per_s: float = 0.0
    power_w: float = 60.0
    sm_clock_mhz: float = 1980.0
    temperature_c: float = 35.0
    mem_used_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """``levels`` held for ``duration_s`` seconds."""

    duration_s: float
    levels: Levels


IDLE = Levels()
GEMM = Levels(
    util_gpu=1.0,
    sm_activity=0.93,
    sm_occupancy=0.45,
    tensor_activity=0.62,
    hmma_activity=0.6,
    dram_bw_util=0.35,
    pcie_tx_bytes_per_s=2.0e8,
    pcie_rx_bytes_per_s=1.0e9,
    power_w=650.0,
    sm_clock_mhz=1755.0,
    temperature_c=71.0,
    mem_used_bytes=60 * GIB,
)
"""A tensor-core-heavy training phase."""
LYING_GPU_UTIL = Levels(
    util_gpu=1.0,
    sm_activity=0.05,
    sm_occupancy=0.02,
    tensor_activity=0.0,
    hmma_activity=0.0,
    dram_bw_util=0.01,
    power_w=110.0,
    sm_clock_mhz=1980.0,
    temperature_c=40.0,
    mem_used_bytes=0,
)
"""GPU-Util 100% with SM activity 5%: one tiny kernel always running (docs/spec.md section 8)."""
DATALOADER_STALL = Levels(
    util_gpu=0.4,
    sm_activity=0.36,
    sm_occupancy=0.2,
    tensor_activity=0.22,
    hmma_activity=0.2,
    dram_bw_util=0.12,
    power_w=250.0,
    sm_clock_mhz=1980.0,
    temperature_c=55.0,
    mem_used_bytes=60 * GIB,
)
"""The GPU waits on input more than half the time."""
FAULTED_COUNTERS = Levels(
    util_gpu=1.0,
    power_w=300.0,
    sm_clock_mhz=1980.0,
    temperature_c=60.0,
    mem_used_bytes=60 * GIB,
)
"""After a GPU fault (Xid), as DCGM documents: GPU-Util 100% while every profiling counter reads 0."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossCheckCase:
    """A scripted formula-vs-hardware scenario: the GPU's levels and what the compute wing would report.

    Attributes:
        levels: The device's levels (SM clock at its max, so OFU = tensor activity).
        formula_mfu: MFU under the chosen convention the scenario implies.
        counted_mfu: MFU under the counted FLOPs, or ``None`` when not counted.
        tokens_are_samples: The run counts samples, not tokens.
    """

    levels: Levels
    formula_mfu: float
    counted_mfu: float | None = None
    tokens_are_samples: bool = False


def _tensor(activity: float) -> Levels:
    return Levels(util_gpu=1.0, sm_activity=0.9, sm_occupancy=0.4, tensor_activity=activity,
                  hmma_activity=activity, dram_bw_util=0.3, power_w=600.0, sm_clock_mhz=1980.0,
                  temperature_c=70.0, mem_used_bytes=60 * GIB)


CROSSCHECK_CASES: dict[str, CrossCheckCase] = {
    "agree": CrossCheckCase(levels=_tensor(0.45), formula_mfu=0.40, counted_mfu=0.42),
    "attention_or_s_wrong": CrossCheckCase(levels=_tensor(0.45), formula_mfu=0.15, counted_mfu=0.42),
    "wrong_peak_or_dtype": CrossCheckCase(levels=_tensor(0.60), formula_mfu=0.25, counted_mfu=0.26),
    "outside_tensor_cores": CrossCheckCase(levels=_tensor(0.05), formula_mfu=0.30, counted_mfu=0.31),
    "counted_in_samples": CrossCheckCase(levels=_tensor(0.50), formula_mfu=0.50 / 512, tokens_are_samples=True),
}
"""Fake-NVML profiles for each cause the cross-check names (gpu/ladder.py), and one where they agree."""
