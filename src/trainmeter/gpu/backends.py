"""Which GPU backend a run opens: NVML on NVIDIA, else ``amdsmi`` on AMD (ROCm), and the name doctor shows.

:func:`open_gpu_backend` tries NVML first (it answers on every NVIDIA machine); when NVML gives no backend and
the machine looks like ROCm (torch built for HIP, or ``/dev/kfd``) it opens amdsmi. On a CPU-only machine the
NVML reason stands. Never raises.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from trainmeter.core.clock import Clock
from trainmeter.gpu.backend import GpuBackendResult

BACKEND_LABELS = {"nvml": "NVML (nvidia-ml-py)", "amdsmi": "amdsmi (ROCm)"}


def looks_like_rocm(modules: Any = None, kfd_path: str = "/dev/kfd") -> bool:
    """torch is built for HIP (already imported: never imported here), or the ROCm kernel device exists."""
    torch = (sys.modules if modules is None else modules).get("torch")
    if getattr(getattr(torch, "version", None), "hip", None):
        return True
    return os.path.exists(kfd_path)


def open_gpu_backend(*, clock: Clock | None = None, open_nvml: Any = None, open_amdsmi: Any = None,
                     rocm: bool | None = None) -> GpuBackendResult:
    """NVML, else amdsmi on a ROCm machine; the result's reason names what was tried.

    Args:
        clock: Passed to the backend.
        open_nvml: ``open_nvml(clock=...)`` (tests); default :func:`trainmeter.gpu.nvml.open_nvml`.
        open_amdsmi: ``open_amdsmi(clock=...)`` (tests); default :func:`trainmeter.gpu.amdsmi_backend.open_amdsmi`.
        rocm: Whether to try amdsmi; default :func:`looks_like_rocm`.
    """
    if open_nvml is None:
        from trainmeter.gpu.nvml import open_nvml
    nvml = open_nvml(clock=clock)
    if nvml.backend is not None:
        return nvml
    if not (looks_like_rocm() if rocm is None else rocm):
        return nvml
    if open_amdsmi is None:
        from trainmeter.gpu.amdsmi_backend import open_amdsmi
    amd = open_amdsmi(clock=clock)
    if amd.backend is not None:
        return amd
    return GpuBackendResult(backend=None, reason=f"{amd.reason} (NVML: {nvml.reason})")


def backend_name(backend: Any) -> str:
    """The label of an open backend for doctor and the passport (``NVML (nvidia-ml-py)``, ``amdsmi (ROCm)``)."""
    name = getattr(backend, "name", None)
    if name in BACKEND_LABELS:
        return BACKEND_LABELS[name]
    return type(backend).__name__
