"""The GPU backend seam every reading goes through (NVML, amdsmi, the tests' fake): records, reasons, Protocol.

A reading the device cannot give is ``None`` in the sample with a reason in :attr:`GpuSample.unavailable`; a
device-level failure raises :class:`GpuUnavailableError` (``fatal``: stop sampling it); opening never raises
(:class:`GpuBackendResult` holds a backend or the reason). Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

REASON_PYNVML_MISSING = "the nvidia-ml-py package (module pynvml) is not installed; pip install nvidia-ml-py"
REASON_LIBRARY_NOT_FOUND = "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on this machine"
REASON_DRIVER_NOT_LOADED = "the NVIDIA kernel driver is not loaded (NVML DriverNotLoaded)"
REASON_NO_DEVICES = "NVML sees no GPU on this machine"
REASON_GPM_NOT_SUPPORTED = (
    "GPM (SM, tensor and DRAM activity) needs a Hopper or newer datacenter GPU; this device reports no GPM support")
REASON_GPM_DRIVER_TOO_OLD = "GPM needs NVIDIA driver R525 or newer (GPM functions not found)"
REASON_GPM_NO_PERMISSION = "NVML refused GPM sampling here (no permission)"
REASON_GPM_FIRST_SAMPLE = (
    "GPM values are averages between two samples; the first arrives one interval after sampling starts")
REASON_MIG = (
    "MIG mode is on: NVML reports no GPU-Util and no whole-GPU GPM for a MIG-enabled GPU; GPM is read per "
    "MIG GPU instance where the device gives it"
)
REASON_MIG_GPM_NOT_SUPPORTED = (
    "MIG mode is on and this device gives no GPM per MIG GPU instance (nvmlGpmMigSampleGet needs a Hopper "
    "or newer datacenter GPU)"
)
REASON_MIG_NO_INSTANCES = "MIG mode is on but NVML lists no MIG device (GPU and compute instance) on it to read"
MIG_GPM_WHAT = "GPM per MIG GPU instance"  # nvmlGpmMigSampleGet in reason texts
REASON_GPU_LOST = "the GPU fell off the bus (NVML GpuIsLost); sampling of it stopped"
REASON_PROCESS_NOT_LISTED = (
    "this process is not in the device's process list (no CUDA context on it yet, or a "
    "container PID namespace hides host PIDs)"
)


REASON_ENERGY_WHAT = "total energy counter"  # nvmlDeviceGetTotalEnergyConsumption in reason texts


def reason_not_supported(what: str) -> str:
    """Reason text for a reading the device does not support."""
    return f"{what}: not supported on this device"


def reason_no_permission(what: str) -> str:
    """Reason text for a reading NVML refused."""
    return f"{what}: NVML refused it (no permission)"


def reason_driver_too_old(what: str) -> str:
    """Reason text for a reading whose NVML function the driver lacks."""
    return f"{what}: the NVIDIA driver is too old (function not found)"


THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
"""NVML clock-event (throttle) reason bits and the names used in ``throttle_reasons``."""


def throttle_reason_names(mask: int) -> tuple[str, ...]:
    """Names of the clock-event reason bits set in ``mask`` (unknown bits as ``0x..``)."""
    names = [name for bit, name in THROTTLE_REASON_BITS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_REASON_BITS)  # distinct bits: the sum is their OR
    if mask & ~known:
        names.append(hex(mask & ~known))
    return tuple(names)


class GpuUnavailableError(Exception):
    """A device-level failure raised by :meth:`GpuBackend.sample`.

    Attributes:
        reason: Human-readable reason, shown as is.
        fatal: True when the device will not come back (stop sampling it).
    """

    def __init__(self, reason: str, *, fatal: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDeviceInfo:
    """Static facts about one NVML device.

    Attributes:
        index: NVML index (not the CUDA ordinal).
        name: Product name as NVML reports it, e.g. ``"NVIDIA H100 80GB HBM3"``.
        uuid: ``"GPU-..."`` UUID; the key to map CUDA devices to NVML devices.
        mem_total_bytes: Device memory in bytes; ``None`` if unreadable.
        mig_enabled: Whether MIG mode is on; ``None`` if unknown / not applicable.
        gpm_supported: Whether trainmeter reads GPM (SM/tensor/DRAM activity) on it.
        gpm_reason: Why GPM is not read, when ``gpm_supported`` is False.
        pci_bus_id: PCI bus id (``"00000000:41:00.0"``) or ``None``.
        pci_device_id: PCI device id, the upper 16 bits of NVML's ``pciDeviceId`` (``0x2330`` for H100 SXM), or
            ``None`` if unreadable; settles a product name that does not say its variant.
        mig_instances: ``(gpu_instance_id, "MIG-..." UUID)`` of each MIG GPU instance NVML lists on a
            MIG-enabled GPU (one per GPU instance), ``()`` otherwise.
        reason: Set when the device cannot be opened at all (e.g. no permission).
    """

    index: int
    name: str
    uuid: str
    mem_total_bytes: int | None = None
    mig_enabled: bool | None = None
    gpm_supported: bool = False
    gpm_reason: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: int | None = None
    mig_instances: tuple[tuple[int, str], ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MigGpmSample:
    """GPM of one MIG GPU instance (``nvmlGpmMigSampleGet`` on the parent GPU's handle). Immutable.

    Attributes:
        gpu_instance_id: The MIG GPU instance id.
        uuid: The instance's ``MIG-...`` UUID, or ``""``.
        values: :data:`GPM_FIELDS` name to value (fractions 0-1, bytes/s), averages over ``gpm_window_s``;
            only the fields read.
        gpm_window_s: Length of the interval the values average over, seconds; ``None`` before two samples.
        unavailable: ``(field, reason)`` pairs for the GPM fields not read.
    """

    gpu_instance_id: int
    uuid: str = ""
    values: dict[str, float] = field(default_factory=dict)
    gpm_window_s: float | None = None
    unavailable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """One reading of one device (docs/spec.md section 8). Immutable; safe to share between threads.

    ``*_util``/``*_activity``/``*_occupancy`` are fractions 0-1; GPM values (``sm_activity`` ...) average over
    ``gpm_window_s`` ending at ``t_s``. A field the device cannot give is ``None`` (:meth:`unavailable_reason`).

    Attributes:
        index: NVML index of the device.
        t_s: Backend clock reading (seconds) when the sample was taken.
        util_gpu: NVML GPU-Util: fraction of time at least one kernel ran (amdsmi: GFX engine activity).
        mem_activity: Fraction of time device memory was read or written (NVML utilization.memory; amdsmi
            memory-controller activity ``umc_activity``); not a bandwidth fraction.
        mem_used_bytes: Device memory in use (all processes), bytes.
        mem_total_bytes: Device memory total, bytes.
        power_w: Board power draw, watts.
        power_limit_w: Enforced power limit, watts.
        sm_clock_mhz: Current SM clock, MHz.
        sm_clock_max_mhz: Maximum SM clock, MHz.
        temperature_c: GPU temperature, degrees Celsius.
        throttle_reasons: Names of active clock-event (throttle) reasons, e.g.
            ``("sw_power_cap",)``; ``()`` when none; ``None`` when unreadable.
        process_mem_bytes: GPU memory used by this process (and watched pids), bytes.
        sm_activity: GPM SM_UTIL: fraction of SM cycles with at least one warp.
        sm_occupancy: GPM SM_OCCUPANCY: resident warps / max warps.
        tensor_activity: GPM ANY_TENSOR_UTIL: fraction of cycles any tensor pipe issued.
        hmma_activity: GPM HMMA_TENSOR_UTIL: FP16/BF16/TF32 tensor pipe only.
        dram_bw_util: GPM DRAM_BW_UTIL: fraction of theoretical DRAM bandwidth (~0.8 max).
        pcie_tx_bytes_per_s: GPM PCIe traffic out of the GPU, bytes/s (NVML gives MiB/s).
        pcie_rx_bytes_per_s: GPM PCIe traffic into the GPU, bytes/s.
        nvlink_tx_bytes_per_s: GPM NVLink write bandwidth, all links, bytes/s.
        nvlink_rx_bytes_per_s: GPM NVLink read bandwidth, all links, bytes/s.
        gpm_window_s: Length of the interval the GPM values average over, seconds.
        mig_gpm: GPM per MIG GPU instance of a MIG-enabled GPU (:class:`MigGpmSample`), ``()`` otherwise.
        mig_gpm_reason: Why a MIG-enabled GPU has no per-instance GPM, or ``None``.
        unavailable: ``(field, reason)`` pairs for fields that are ``None``.
    """

    index: int
    t_s: float
    util_gpu: float | None = None
    mem_activity: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    process_mem_bytes: int | None = None
    sm_activity: float | None = None
    sm_occupancy: float | None = None
    tensor_activity: float | None = None
    hmma_activity: float | None = None
    dram_bw_util: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    gpm_window_s: float | None = None
    mig_gpm: tuple[MigGpmSample, ...] = ()
    mig_gpm_reason: str | None = None
    unavailable: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def unavailable_reason(self, name: str) -> str | None:
        """Return why field ``name`` is ``None`` (``None`` if it has a value or no reason)."""
        return dict(self.unavailable).get(name)


NUMERIC_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in fields(GpuSample)
    if f.name not in ("index", "t_s", "throttle_reasons", "unavailable", "gpm_window_s", "mig_gpm", "mig_gpm_reason")
)
"""Names of the numeric reading fields of :class:`GpuSample` (averaged by the sampler)."""

GPM_FIELDS: tuple[str, ...] = ("sm_activity", "sm_occupancy", "tensor_activity", "hmma_activity", "dram_bw_util",
                               "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s",
                               "nvlink_rx_bytes_per_s")
"""The :class:`GpuSample` fields that come from GPM (Hopper+)."""


class GpuBackend(Protocol):
    """Read-only access to the GPUs of this machine; thread-safe (:meth:`sample` may run concurrently per index).

    An optional ``total_energy_mj(index) -> (mJ or None, reason or None)`` reads the energy counter (gpu/energy.py).
    """

    def device_count(self) -> int:
        """Number of devices the backend can enumerate."""
        ...

    def device_info(self, index: int) -> GpuDeviceInfo:
        """Static facts about device ``index`` (never raises; sets ``reason`` instead)."""
        ...

    def sample(self, index: int) -> GpuSample:
        """Read device ``index`` now.

        Raises:
            GpuUnavailableError: On device-level failure only, never for a single field.
        """
        ...

    def driver_version(self) -> str | None:
        """The NVIDIA driver version string, or ``None``."""
        ...

    def close(self) -> None:
        """Release resources (GPM buffers, NVML refcount). Idempotent; never raises."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuBackendResult:
    """The outcome of opening a backend: ``backend``, or ``None`` and the ``reason`` (shown to the user)."""

    backend: GpuBackend | None
    reason: str | None = None


def quietly(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)``, its exception swallowed (cleanup must never raise)."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001, S110
        pass


def opened(make: Callable[[], GpuBackend], shut_down: Callable[[], Any], library: str,
           no_devices: str) -> GpuBackendResult:
    """The result of building a backend over an initialised ``library``: listing failures and no device are reasons."""
    try:
        backend = make()
    except Exception as exc:  # noqa: BLE001
        quietly(shut_down)
        return GpuBackendResult(backend=None, reason=f"{library} started but listing GPUs failed: {exc}")
    if backend.device_count() == 0:
        backend.close()
        return GpuBackendResult(backend=None, reason=no_devices)
    return GpuBackendResult(backend=backend)
