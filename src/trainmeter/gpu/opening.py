"""Opening the GPU backend for a run: open it, list the devices, select those to sample.

Called by :meth:`trainmeter.gpu.sampler.GpuSampler.for_run` on whichever thread opens the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainmeter.core.clock import Clock
from trainmeter.gpu.backend import GpuBackend, GpuBackendResult, GpuDeviceInfo
from trainmeter.gpu.selection import GpuSelection, cuda_context_uuids, parse_gpus, select_gpus


@dataclass(frozen=True, slots=True)
class OpenedGpus:
    """An opened backend (the caller closes it) and the devices chosen on it, or ``backend=None`` and why."""

    backend: GpuBackend | None
    selection: GpuSelection | None = None
    reason: str | None = None


def open_for_run(gpus: str | int | Sequence[int | str] | None, *, clock: Clock,
                 open_backend: Callable[..., GpuBackendResult] | None = None,
                 cuda_uuids: Sequence[str] | None | Callable[[], Sequence[str] | None] = cuda_context_uuids,
                 env: Mapping[str, str] | None = None) -> OpenedGpus:
    """Open the backend and select the devices ``gpus`` names (see :meth:`GpuSampler.for_run`).

    ``cuda_uuids``: the CUDA context's device UUIDs, or a function reading them once the backend is open.

    Raises:
        ValueError: A malformed ``gpus`` value or one naming no device here (the backend is closed first).
    """
    spec = parse_gpus(gpus)
    if open_backend is None:
        from trainmeter.gpu.backends import open_gpu_backend

        open_backend = open_gpu_backend
    result = open_backend(clock=clock)
    backend = result.backend
    if backend is None:
        return OpenedGpus(None, reason=result.reason)
    infos = [safe(lambda i=i: backend.device_info(i), GpuDeviceInfo(index=i, name="", uuid=""))
             for i in range(backend.device_count())]
    uuids = cuda_uuids() if callable(cuda_uuids) else cuda_uuids
    try:
        selection = select_gpus(spec, infos, cuda_uuids=uuids or None, env=env)
    except ValueError:
        backend.close()
        raise
    return OpenedGpus(backend, selection)


def safe(fn: Callable[[], Any], default: Any) -> Any:
    """``fn()``, or ``default`` when it raises."""
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return default
