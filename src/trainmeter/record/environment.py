"""The environment a run ran in, for the passport. No host name, user or path."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
from typing import Any

from trainmeter._version import __version__


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or None


def platform_name() -> str:
    """``platform.platform()``; on Linux with glibc built from ``os.uname()`` and ``CS_GNU_LIBC_VERSION`` (microseconds,
    where ``platform.platform()`` scans the interpreter binary for the libc version: tens of milliseconds)."""
    try:
        uname = os.uname()
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return platform.platform()
    name, _, version = libc.partition(" ")
    if uname.sysname != "Linux" or name != "glibc" or not version:
        return platform.platform()
    return f"{uname.sysname}-{uname.release}-{uname.machine}-with-glibc{version}".replace(" ", "_")


@functools.cache
def _host() -> dict[str, Any]:
    """Facts fixed for the life of the process, read once."""
    return {"trainmeter": __version__, "python": platform.python_version(), "platform": platform_name(),
            "cpu": _cpu_model(), "cpu_count": os.cpu_count()}


def describe_environment() -> dict[str, Any]:
    """Python, torch (if already imported), platform and CPU facts; the host's read once per process. Any thread."""
    torch = sys.modules.get("torch")
    torch_version = getattr(torch, "__version__", None)
    cuda_version = None
    cuda_devices: list[str] = []
    if torch is not None:
        with contextlib.suppress(Exception):
            cuda_version = torch.version.cuda
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                cuda_devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    host = _host()
    return {"trainmeter": host["trainmeter"], "python": host["python"],
            "torch": str(torch_version) if torch_version is not None else None, "cuda": cuda_version,
            "cuda_devices": cuda_devices, **{k: host[k] for k in ("platform", "cpu", "cpu_count")}}
