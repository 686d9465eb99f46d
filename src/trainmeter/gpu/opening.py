"""Opening the GPU backend for a run: open NVML (or a given backend), list the devices, select those to sample.

Called by :meth:`trainmeter.gpu.sampler.GpuSampler.for_run` on whichever thread opens the
backend (the sampler's own, for :meth:`~trainmeter.gpu.sampler.GpuSampler.in_background`).
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
    """An opened backend and the devices chosen on it, or ``backend=None`` and why.

    Attributes:
        backend: The opened backend (the caller owns and closes it), or ``None``.
        selection: The devices chosen and how, or ``None`` without a backend.
        reason: Why there is no backend, else ``None``.
    """

    backend: GpuBackend | None
    selection: GpuSelection | None = None
    reason: str | None = None


def open_for_run(
    gpus: str | int | Sequence[int | str] | None,
    *,
    clock: Clock,
    open_backend: Callable[..., GpuBackendResult] | None = None,
    cuda_uuids: Sequence[str] | None | Callable[[], Sequence[str] | None] = cuda_context_uuids,
    env: Mapping[str, str] | None = None,
) -> OpenedGpus:
    """Open the backend and select the devices ``gpus`` names (see :meth:`GpuSampler.for_run`).

    ``cuda_uuids``: the CUDA context's device UUIDs, or a function that reads them (called
    only once the backend is open).

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
    infos = [
        safe(lambda i=i: backend.device_info(i), GpuDeviceInfo(index=i, name="", uuid=""))
        for i in range(backend.device_count())
    ]
    uuids = cuda_uuids() if callable(cuda_uuids) else cuda_uuids
    uuids = uuids or None
    try:
        selection = select_gpus(spec, infos, cuda_uuids=uuids, env=env)
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
