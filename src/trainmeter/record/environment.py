"""The environment a run ran in, for the passport. No host name, user or path."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def describe_environment() -> dict[str, Any]:
    """Return python, torch, platform and CPU facts (torch only if already imported)."""
    torch = sys.modules.get("torch")
    torch_version = getattr(torch, "__version__", None) if torch is not None else None
    cuda_version = None
    cuda_devices: list[str] = []
    if torch is not None:
        try:
            cuda_version = torch.version.cuda
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                cuda_devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:
            pass
    from trainmeter._version import __version__

    return {
        "trainmeter": __version__,
        "python": platform.python_version(),
        "torch": str(torch_version) if torch_version is not None else None,
        "cuda": cuda_version,
        "cuda_devices": cuda_devices,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
