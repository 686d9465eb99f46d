"""Memory at sampling points (docs/spec.md section 4): process RSS and, on CUDA, allocator figures, and utilization."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True, eq=False)
class ProcessMemory:
    """What the node sampler last read of this process (each value swapped whole): ``latest`` ``(rss_bytes,
    host_total_bytes)``, ``thread_cpu_s`` per native thread id (docs/spec.md section 17); ``None`` unread. Any thread."""

    latest: tuple[int | None, int | None] = (None, None)
    thread_cpu_s: dict[int, float] | None = None

    def post(self, rss_bytes: int | None, host_total_bytes: int | None) -> None:
        """Post a reading (the node sampler's thread); a ``None`` keeps the last known host total."""
        self.latest = (rss_bytes, host_total_bytes if host_total_bytes is not None else self.latest[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryReading:
    """One memory sample (docs/spec.md section 4); ``None`` where the source is unavailable."""

    rss_bytes: int | None
    rss_peak_bytes: int | None
    cuda: dict[str, Any] | None = None
    host_total_bytes: int | None = None
    utilization: float | None = None

    to_dict = asdict  # a JSON-ready dict


class MemoryProbe:
    """Reads the last posted RSS and CUDA allocator statistics when CUDA is in use; never calls psutil. One thread."""

    def __init__(self, cuda_memory: Callable[[], Any] | None = None,
                 process: Callable[[], ProcessMemory] | None = None) -> None:
        """``cuda_memory`` makes the allocator reader (``.available``, ``.sample_interval()``), or ``None``;
        ``process`` returns the board the node sampler posts RSS to (the run's current one; ``None``: no RSS)."""
        self._board = process
        self.rss_peak_bytes: int | None = None
        self.host_total_bytes: int | None = None
        self._cuda: Any = None
        with suppress(Exception):
            monitor = cuda_memory() if cuda_memory is not None else None
            self._cuda = monitor if monitor is not None and monitor.available else None

    def sample(self) -> MemoryReading:
        """Take one sample (and reset the CUDA per-interval peak)."""
        rss: int | None = None
        if self._board is not None:
            rss, self.host_total_bytes = self._board().latest
        if rss is not None and (self.rss_peak_bytes is None or rss > self.rss_peak_bytes):
            self.rss_peak_bytes = rss
        cuda = None
        if self._cuda is not None:
            with suppress(Exception):
                cuda = self._cuda.sample_interval()
        return MemoryReading(rss_bytes=rss, rss_peak_bytes=self.rss_peak_bytes, cuda=cuda,
                             host_total_bytes=self.host_total_bytes,
                             utilization=utilization(cuda, rss, self.host_total_bytes))


def utilization(cuda: dict[str, Any] | None, rss_bytes: int | None, host_total_bytes: int | None) -> float | None:
    """``mem_utilization`` (0-1, docs/spec.md section 4): peak allocated / device total on CUDA, else RSS / host."""
    if cuda and cuda.get("allocated_bytes") is not None:
        peak, total = cuda.get("peak_allocated_bytes"), cuda.get("device_total_bytes")
        return peak / total if peak is not None and total else None
    return rss_bytes / host_total_bytes if rss_bytes is not None and host_total_bytes else None
