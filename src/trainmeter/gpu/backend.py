"""The GPU backend seam every reading goes through (NVML, amdsmi, the tests' fake): records, reasons, Protocol, and
which backend a run opens (NVML on NVIDIA, else ``amdsmi`` on a ROCm machine; on a CPU-only one the NVML reason).

A missing reading is ``None`` with a reason; a device-level failure raises :class:`GpuUnavailableError`; opening
never raises (docs/spec.md section 8). Imports nothing heavy.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from trainmeter.core.clock import Clock

if TYPE_CHECKING:
    from trainmeter.gpu.selection import GpuSelection

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
    "MIG GPU instance where the device gives it")
REASON_MIG_GPM_NOT_SUPPORTED = (
    "MIG mode is on and this device gives no GPM per MIG GPU instance (nvmlGpmMigSampleGet needs a Hopper "
    "or newer datacenter GPU)")
REASON_MIG_NO_INSTANCES = "MIG mode is on but NVML lists no MIG device (GPU and compute instance) on it to read"
MIG_GPM_WHAT = "GPM per MIG GPU instance"  # nvmlGpmMigSampleGet in reason texts
REASON_GPU_LOST = "the GPU fell off the bus (NVML GpuIsLost); sampling of it stopped"
REASON_ENERGY_WHAT = "total energy counter"  # nvmlDeviceGetTotalEnergyConsumption in reason texts
# a reading's reason, .format(what): the device does not support it, NVML refused it, the driver lacks its function
REASON_NOT_SUPPORTED = "{}: not supported on this device"
REASON_NO_PERMISSION = "{}: NVML refused it (no permission)"
REASON_DRIVER_TOO_OLD = "{}: the NVIDIA driver is too old (function not found)"


class GpuUnavailableError(Exception):
    """A device-level failure raised by :meth:`GpuBackend.sample`: its ``reason``, ``fatal`` when it will not come
    back (stop sampling it)."""

    def __init__(self, reason: str, *, fatal: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDeviceInfo:
    """Static facts about one NVML device: its NVML index (not the CUDA ordinal), product name, ``"GPU-..."`` UUID (how
    CUDA devices map to it), memory in bytes, MIG mode, whether GPM is read (else ``gpm_reason``), PCI device id
    (``pciDeviceId >> 16``: settles a name that does not say its variant), ``(gpu_instance_id, "MIG-..." UUID)`` of
    each MIG GPU instance, and ``reason`` when it cannot be opened at all. ``None``: unreadable."""

    index: int
    name: str
    uuid: str
    mem_total_bytes: int | None = None
    mig_enabled: bool | None = None
    gpm_supported: bool = False
    gpm_reason: str | None = None
    pci_device_id: int | None = None
    mig_instances: tuple[tuple[int, str], ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MigGpmSample:
    """GPM of one MIG GPU instance (``nvmlGpmMigSampleGet``; its ``MIG-...`` UUID or ``""``). Immutable: ``values``
    by :data:`GPM_FIELDS` name (fractions, bytes/s) over ``gpm_window_s`` seconds (``None`` before two samples), and
    ``(field, reason)`` for the fields not read."""

    gpu_instance_id: int
    uuid: str = ""
    values: dict[str, float] = field(default_factory=dict)
    gpm_window_s: float | None = None
    unavailable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """One reading of one device; every field, its unit and its source: docs/spec.md section 8. Immutable.

    ``t_s``: the backend clock at the sample; GPM values average over ``gpm_window_s`` ending there; a field the
    device cannot give is ``None`` with ``(field, reason)`` in ``unavailable``.
    """

    index: int
    t_s: float
    util_gpu: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
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
    if f.name not in ("index", "t_s", "unavailable", "gpm_window_s", "mig_gpm", "mig_gpm_reason")
)
"""Names of the numeric reading fields of :class:`GpuSample` (averaged by the sampler)."""

# (GPM metric id, GpuSample field, scale to our unit): ids from pynvml / nvml.h; percent, MiB/s
GPM_METRICS: tuple[tuple[int, str, float], ...] = (
    (2, "sm_activity", 0.01),  # SM_UTIL
    (3, "sm_occupancy", 0.01),  # SM_OCCUPANCY
    (5, "tensor_activity", 0.01),  # ANY_TENSOR_UTIL
    (7, "hmma_activity", 0.01),  # HMMA_TENSOR_UTIL
    (10, "dram_bw_util", 0.01),  # DRAM_BW_UTIL
    (20, "pcie_tx_bytes_per_s", 2**20),  # PCIE_TX_PER_SEC
    (21, "pcie_rx_bytes_per_s", 2**20),  # PCIE_RX_PER_SEC
    (61, "nvlink_tx_bytes_per_s", 2**20),  # NVLINK_TOTAL_TX_PER_SEC
    (60, "nvlink_rx_bytes_per_s", 2**20),  # NVLINK_TOTAL_RX_PER_SEC
)
GPM_FIELDS: tuple[str, ...] = tuple(fld for _, fld, _ in GPM_METRICS)
"""The :class:`GpuSample` fields that come from GPM (Hopper+)."""


class GpuBackend(Protocol):
    """Read-only access to the GPUs of this machine; thread-safe (:meth:`sample` may run concurrently per index).

    ``device_info`` never raises (it sets ``reason``); ``sample`` raises :class:`GpuUnavailableError` only for a
    device-level failure; ``close`` is idempotent and never raises. An optional ``total_energy_mj(index) -> (mJ or
    None, reason or None)`` reads the energy counter (gpu/sampler.py).
    """

    def device_count(self) -> int: ...

    def device_info(self, index: int) -> GpuDeviceInfo: ...

    def sample(self, index: int) -> GpuSample: ...

    def driver_version(self) -> str | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuBackendResult:
    """The outcome of opening a backend: ``backend`` (and the devices ``selection`` chose on it, when a run opened
    it: gpu/sampler.py), or ``None`` and the ``reason`` (shown to the user)."""

    backend: GpuBackend | None
    reason: str | None = None
    selection: GpuSelection | None = None


def safe(fn: Callable[[], Any], default: Any = None) -> Any:
    """``fn()``, or ``default`` when it raises (cleanup and optional reads must never raise)."""
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return default


def open_library(module: Any, import_name: str, library: str, *, missing: str, init: Callable[[Any], Any],
                 make: Callable[[Any], GpuBackend], shut_down: str, no_devices: str,
                 init_reason: Callable[[Any, BaseException], str | None] = lambda lib, exc: None) -> GpuBackendResult:
    """A backend over ``module`` (else ``import_name`` imported; ``missing``: the reason without it), initialised by
    ``init`` and built by ``make``; never raises: a failure is the result's reason (``init_reason``: a known init
    failure's text), listing no device too (``no_devices``)."""
    lib = module
    if lib is None:
        try:
            lib = importlib.import_module(import_name)
        except ImportError:
            return GpuBackendResult(backend=None, reason=missing)
    try:
        init(lib)
    except Exception as exc:  # noqa: BLE001 - every init failure becomes a reason
        why = init_reason(lib, exc) or f"{library} could not start: {type(exc).__name__}: {exc}"
        return GpuBackendResult(backend=None, reason=why)
    try:
        backend = make(lib)
    except Exception as exc:  # noqa: BLE001
        safe(lambda: getattr(lib, shut_down)())
        return GpuBackendResult(backend=None, reason=f"{library} started but listing GPUs failed: {exc}")
    if backend.device_count() == 0:
        backend.close()
        return GpuBackendResult(backend=None, reason=no_devices)
    return GpuBackendResult(backend=backend)


BACKEND_LABELS = {"nvml": "NVML (nvidia-ml-py)", "amdsmi": "amdsmi (ROCm)"}


def looks_like_rocm(modules: Any = None, kfd_path: str = "/dev/kfd") -> bool:
    """torch is built for HIP (already imported: never imported here), or the ROCm kernel device exists."""
    torch = (sys.modules if modules is None else modules).get("torch")
    return bool(getattr(getattr(torch, "version", None), "hip", None)) or os.path.exists(kfd_path)


def open_gpu_backend(*, clock: Clock | None = None, open_nvml: Any = None, open_amdsmi: Any = None,
                     rocm: bool | None = None) -> GpuBackendResult:
    """NVML, else amdsmi when ``rocm`` (default :func:`looks_like_rocm`); the reason names what was tried.
    ``open_nvml`` / ``open_amdsmi``: ``fn(clock=...)`` openers (tests)."""
    if open_nvml is None:
        from trainmeter.gpu.nvml import open_nvml
    nvml = open_nvml(clock=clock)
    if nvml.backend is not None or not (looks_like_rocm() if rocm is None else rocm):
        return nvml
    if open_amdsmi is None:
        from trainmeter.gpu.amdsmi_backend import open_amdsmi
    amd = open_amdsmi(clock=clock)
    if amd.backend is not None:
        return amd
    return GpuBackendResult(backend=None, reason=f"{amd.reason} (NVML: {nvml.reason})")


def backend_name(backend: Any) -> str:
    """The label of an open backend for doctor and the passport (``NVML (nvidia-ml-py)``, ``amdsmi (ROCm)``)."""
    return BACKEND_LABELS.get(getattr(backend, "name", None), type(backend).__name__)
