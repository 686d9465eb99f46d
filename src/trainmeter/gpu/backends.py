"""Which GPU backend a run opens: NVML on NVIDIA, else ``amdsmi`` on a ROCm machine; the name doctor shows.

On a CPU-only machine the NVML reason stands. Never raises.
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
