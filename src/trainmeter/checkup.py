"""``tm.doctor()``: what trainmeter can see here, and why not (docs/spec.md section 8, "Doctor").

Never initialises CUDA; imports torch when installed. Any thread.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainmeter.core.text import printable
from trainmeter.gpu.backend import (
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    REASON_PYNVML_MISSING,
    GpuBackend,
    GpuBackendResult,
    safe,
)
from trainmeter.sizes import format_bytes, format_percent, format_watts
from trainmeter.widget.host import ipython_shell

_UNSET: Any = object()
_GPM_FIXES = (("driver", "upgrade the NVIDIA driver to R525 or newer"),  # a word of GPM's reason, and its fix
              ("permission", "ask the administrator to allow GPM/profiling counters"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One doctor line: what was checked (``"GPM GPU 0"``), ``ok`` (``True`` works, ``False`` should work here and
    ``fix`` says how, ``None`` does not apply here), what was found."""

    name: str
    ok: bool | None
    detail: str
    fix: str | None = None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def major_version(version: str) -> int | None:
    """The major version of a distribution's version text (``"7.1.0"`` -> 7), else ``None``."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def doctor(*, backend: GpuBackend | None = None, open_backend: Callable[[], GpuBackendResult] | None = None,
           ipython: Any = _UNSET, version_of: Callable[[str], str | None] = _version, torch_module: Any = _UNSET,
           modules: Any = None, env: Any = None, lab_settings: Sequence[str] | None = None) -> list[Check]:
    """Run every check; never raises. Every probe can be injected (tests): an open GPU ``backend`` (not closed
    here; default one from ``open_backend``, closed after), the IPython shell, ``version_of`` (distribution ->
    version or ``None``), ``torch``, ``sys.modules``, ``os.environ`` and JupyterLab's settings files
    (widget/restore_route.py)."""
    modules = sys.modules if modules is None else modules
    env = os.environ if env is None else env
    shell = ipython_shell() if ipython is _UNSET else ipython
    colab = "google.colab" in modules
    from trainmeter.widget.restore_route import subshell_findings  # ipykernel 7 subshells, JupyterLab's setting

    torch_checks, cuda_count = _torch_checks(torch_module)
    psutil_version = version_of("psutil")
    psutil = (Check(name="psutil", ok=True, detail=f"psutil {psutil_version}: host CPU and memory are sampled")
              if psutil_version else Check(name="psutil", ok=False, fix="pip install psutil",
                                           detail="psutil is not installed: no host CPU/memory panel"))
    return [_front_end(shell, colab, env), _widgets(version_of, colab, shell), _ipykernel(version_of, shell),
            *subshell_findings(version_of, shell, env, lab_settings), *torch_checks,
            *_gpu_checks(backend, open_backend, cuda_count), psutil, *_host_patch_checks(env, modules)]


def _host_patch_checks(env: Any, modules: Any) -> list[Check]:
    """One line per host patch, and one for unknown ``TRAINMETER_DISABLE`` keys."""
    from trainmeter.core import host_patches

    checks: list[Check] = []
    unknown = host_patches.unknown_keys(env)
    if unknown:
        checks.append(Check(name=host_patches.DISABLE_ENV, ok=False, detail=f"unknown key(s): {', '.join(unknown)}",
                            fix=f"use the valid keys: {', '.join(host_patches.KEYS)}"))
    for patch, on, why, result in host_patches.report(env, modules):
        refused = on and result.ok is False and patch.fallback is None
        detail = f"{patch.touches}; {'refused' if refused else why}; check: {result.detail}"
        if on and result.ok is False and patch.fallback is not None:
            detail += f" ({patch.fallback})"
        checks.append(Check(name=f"patch {patch.key}", ok=None if not on else not refused, detail=detail,
                            fix=f"remove {patch.key} from {host_patches.DISABLE_ENV}" if not on else None))
    return checks


def _front_end(shell: Any, colab: bool, env: Any) -> Check:
    if shell is None:
        return Check(name="front end", ok=None, detail="not inside IPython/Jupyter: output is plain text, no widget")
    kind = type(shell).__name__
    if kind == "TerminalInteractiveShell":
        return Check(name="front end", ok=None, detail="IPython in a terminal: output is plain text, no widget")
    where = "Google Colab" if colab else ("VS Code" if "VSCODE_PID" in env else "Jupyter")
    return Check(name="front end", ok=True, detail=f"{where} kernel ({kind})")


def _widgets(version_of: Callable[[str], str | None], colab: bool, shell: Any) -> Check:
    anywidget, ipywidgets = version_of("anywidget"), version_of("ipywidgets")
    missing = [n for n, v in (("anywidget", anywidget), ("ipywidgets", ipywidgets)) if v is None]
    if missing:
        return Check(name="widget manager", ok=False if shell is not None else None,
                     detail=f"{' and '.join(missing)} not installed: the live widget falls back to text",
                     fix=f"pip install {' '.join(missing)}, then restart the kernel")
    detail = (f"anywidget {anywidget}, ipywidgets {ipywidgets}; the front end's widget manager shows itself when the "
              "widget renders")
    fix = "in Colab run: from google.colab import output; output.enable_custom_widget_manager()" if colab else None
    return Check(name="widget manager", ok=True, detail=detail, fix=fix)


def _ipykernel(version_of: Callable[[str], str | None], shell: Any) -> Check:
    version = version_of("ipykernel")
    if version is None:
        return Check(name="ipykernel", ok=None if shell is None else False, detail="ipykernel not installed")
    if (major_version(version) or 0) >= 7:
        detail = (f"ipykernel {version}: output from background threads reaches a cell only with explicit parent "
                  "routing; trainmeter routes its thread output to the cell that started the run")
    else:
        detail = f"ipykernel {version}: background-thread output goes to the most recently run cell"
    return Check(name="ipykernel", ok=True, detail=detail)


def _torch_checks(torch: Any) -> tuple[list[Check], int | None]:
    if torch is _UNSET:
        try:
            torch = importlib.import_module("torch")
        except Exception:  # noqa: BLE001
            torch = None
    if torch is None:
        return [Check(name="torch", ok=False, detail="torch is not installed", fix="pip install torch")], None
    version = str(getattr(torch, "__version__", "?"))
    checks = [Check(name="torch", ok=True, detail=f"torch {version}")]
    try:
        cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if available else 0
    except Exception as exc:  # noqa: BLE001
        checks.append(Check(name="CUDA", ok=False, detail=f"torch.cuda failed: {exc}"))
        return checks, None
    if cuda_version is None:
        checks.append(Check(name="CUDA", ok=None, detail="CPU-only torch build: no GPU training, no allocator memory"))
    elif not available:
        checks.append(Check(name="CUDA", ok=False, detail=f"torch built for CUDA {cuda_version} but no GPU is usable",
                            fix="check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"))
    else:
        checks.append(Check(name="CUDA", ok=True, detail=f"CUDA {cuda_version}, {count} device(s) visible to torch"))
    return checks, count


def _gpu_checks(backend: GpuBackend | None, open_backend: Callable[[], GpuBackendResult] | None,
                cuda_count: int | None) -> list[Check]:
    owned, reason = backend is None, None
    if owned:
        from trainmeter.gpu.backend import open_gpu_backend

        try:
            result = (open_backend or open_gpu_backend)()
        except Exception as exc:  # noqa: BLE001
            result = GpuBackendResult(backend=None, reason=f"opening NVML failed: {exc}")
        backend, reason = result.backend, result.reason
    if backend is None:
        reason = reason or "no GPU backend"
        detail = f"{reason}; GPU counters and the ladder are not available"
        if not cuda_count and reason == REASON_LIBRARY_NOT_FOUND:  # no GPU here
            return [Check(name="NVML", ok=None, detail=detail)]
        fix = ("pip install nvidia-ml-py" if reason == REASON_PYNVML_MISSING
               else "check the NVIDIA driver with nvidia-smi")
        return [Check(name="NVML", ok=False, detail=detail, fix=fix)]
    try:
        return _device_checks(backend)
    except Exception as exc:  # noqa: BLE001
        return [Check(name="NVML", ok=False, detail=f"reading GPUs failed: {exc}")]
    finally:
        if owned:
            safe(backend.close)


def _device_checks(backend: GpuBackend) -> list[Check]:
    from trainmeter.gpu.backend import backend_name

    count = backend.device_count()
    amd = getattr(backend, "name", None) == "amdsmi"
    checks = [Check(name="GPU backend", ok=True, detail=f"{backend_name(backend)} is in use"),
              Check(name="amdsmi" if amd else "NVML", ok=True,
                    detail=f"driver {backend.driver_version() or '?'}, {count} GPU(s)")]
    for i in range(count):
        info = backend.device_info(i)
        if info.reason:
            checks.append(
                Check(name=f"GPU {i}", ok=False, detail=info.reason, fix="run as a user allowed to open this GPU"))
            continue
        mem = "" if info.mem_total_bytes is None else f", {format_bytes(info.mem_total_bytes)}"
        detail = f"{info.name} ({info.uuid}){mem}"
        try:
            s = backend.sample(i)
            util = "n/a" if s.util_gpu is None else format_percent(s.util_gpu)  # as the widget's GPU panel
            power = "n/a W" if s.power_w is None else format_watts(s.power_w)
            temp = "n/a C" if s.temperature_c is None else f"{s.temperature_c:.0f} C"
            detail += f"; {'GFX activity' if amd else 'GPU-Util'} {util}, {power}, {temp}"
            checks.append(Check(name=f"GPU {i}", ok=True, detail=detail))
        except Exception as exc:  # noqa: BLE001
            checks.append(Check(name=f"GPU {i}", ok=False, detail=f"{detail}; reading it failed: {exc}"))
        checks.append(_gpm_check(i, info.gpm_supported, info.gpm_reason) if not amd else
                      Check(name=f"counters GPU {i}", ok=None, detail=info.gpm_reason or "not read"))
    return checks


def _gpm_check(index: int, supported: bool, reason: str | None) -> Check:
    name = f"GPM GPU {index}"
    if supported:
        return Check(name=name, ok=True, detail="SM, tensor and DRAM activity are read (full ladder)")
    reason = reason or "not supported"
    fix = next((fix for word, fix in _GPM_FIXES if word in reason), None)
    if fix is not None:
        return Check(name=name, ok=False, detail=reason, fix=fix)
    return Check(name=name, ok=None, detail=reason if reason == REASON_MIG else
                 f"{reason}; the ladder stops at GPU-Util (plus MFU)")


def format_doctor(checks: Sequence[Check]) -> str:
    """One line per check: ``[ ok ] name: detail  (fix: ...)``."""
    marks = {True: " ok ", False: "FAIL", None: "n/a "}
    # printable: a GPU name, a path, a peak source are text from outside (core/text.py)
    return "\n".join(printable(f"[{marks[c.ok]}] {c.name}: {c.detail}" + (f"  (fix: {c.fix})" if c.fix else ""))
                     for c in checks)
