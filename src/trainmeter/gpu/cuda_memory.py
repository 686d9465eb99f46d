"""PyTorch caching-allocator memory: allocated, reserved, per-interval peaks, retries, OOMs; memory snapshots.

Host-side counters (no device sync), the peak reset after each read (docs/spec.md sections 4 and 8); without torch
or CUDA every field is ``None`` and ``reason`` says why; nothing raises. Thread safety: read an
:class:`AllocatorMemoryReader` from one thread at a time (it resets peaks).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainmeter.gpu.backend import safe

REASON_NO_TORCH = "torch is not imported in this process"
REASON_NO_CUDA = "torch.cuda is not available (CPU-only build or no GPU)"
REASON_NOT_INITIALISED = "CUDA is not initialised in this process yet"


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatorMemory:
    """One reading of the caching allocator for one device (bytes, counts; docs/spec.md section 8): ``peak_*`` since
    the previous reading, the counts cumulative; ``reason``: why the fields are ``None``."""

    device_index: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    device_total_bytes: int | None = None
    headroom_bytes: int | None = None
    reason: str | None = None


# AllocatorMemory field -> torch.cuda.memory_stats key
_STATS = {"allocated_bytes": "allocated_bytes.all.current", "reserved_bytes": "reserved_bytes.all.current",
          "peak_allocated_bytes": "allocated_bytes.all.peak", "peak_reserved_bytes": "reserved_bytes.all.peak",
          "num_alloc_retries": "num_alloc_retries", "num_ooms": "num_ooms"}


def _cuda_ready(torch_module: Any) -> tuple[Any, str | None]:
    """``torch`` (``torch_module``, else the imported one) and ``None`` when CUDA is usable, else the reason. Never
    initialises CUDA."""
    torch = torch_module if torch_module is not None else sys.modules.get("torch")
    if torch is None:
        return None, REASON_NO_TORCH
    try:
        if not torch.cuda.is_available():
            return torch, REASON_NO_CUDA
        if not torch.cuda.is_initialized():
            return torch, REASON_NOT_INITIALISED
    except Exception as exc:  # noqa: BLE001
        return torch, f"torch.cuda failed: {exc}"
    return torch, None


class AllocatorMemoryReader:
    """Reads allocator memory of CUDA ordinal ``device_index`` (``None``: the current device) and, with
    ``reset_peaks``, resets the peaks. ``torch_module``: ``torch`` (tests); default the imported one, never imported."""

    def __init__(self, device_index: int | None = None, *, torch_module: Any = None, reset_peaks: bool = True) -> None:
        self._device_index = device_index
        self._torch_module = torch_module
        self._reset = reset_peaks

    def sample_interval(self) -> dict[str, Any]:
        """One reading as a JSON-ready dict (fields of :class:`AllocatorMemory`)."""
        return asdict(self.read())

    def read(self) -> AllocatorMemory:
        """One reading; never raises (failures become ``reason``)."""
        torch, reason = _cuda_ready(self._torch_module)
        if reason is not None:
            return AllocatorMemory(device_index=self._device_index, reason=reason)
        try:
            cuda = torch.cuda
            index = self._device_index if self._device_index is not None else int(cuda.current_device())
            stats = cuda.memory_stats(index)
            total = int(cuda.get_device_properties(index).total_memory)
            if self._reset:
                cuda.reset_peak_memory_stats(index)
        except Exception as exc:  # noqa: BLE001
            return AllocatorMemory(device_index=self._device_index, reason=f"torch.cuda.memory_stats failed: {exc}")
        got = {name: None if stats.get(key) is None else int(stats[key]) for name, key in _STATS.items()}
        peak = got["peak_reserved_bytes"]
        return AllocatorMemory(device_index=index, **got, device_total_bytes=total,
                               headroom_bytes=None if peak is None else total - peak)


class CudaMemoryMonitor(AllocatorMemoryReader):
    """The interface :mod:`trainmeter.core.memory` uses: peaks reset once at start, then per interval. ``available``:
    torch is imported with a usable CUDA device (maybe not yet initialised: readings then carry a reason)."""

    def __init__(self, device_index: int | None = None, *, torch_module: Any = None) -> None:
        super().__init__(device_index, torch_module=torch_module)
        reason = _cuda_ready(torch_module)[1]
        self.available = reason is None or reason == REASON_NOT_INITIALISED
        if reason is None:
            self.read()  # resets the peaks once, so the first interval starts now


def start_memory_history(*, max_entries: int = 100_000, torch_module: Any = None) -> str | None:
    """Start recording allocation history (with stacks; a snapshot shows only later allocations): ``None``, or why
    not."""
    torch, reason = _cuda_ready(torch_module)
    if reason is not None:
        return reason
    try:
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
    except Exception as exc:  # noqa: BLE001
        return f"could not record memory history: {exc}"
    return None


def stop_memory_history(*, torch_module: Any = None) -> None:
    """Stop recording allocation history; never raises."""
    torch, reason = _cuda_ready(torch_module)
    if reason is None:
        safe(lambda: torch.cuda.memory._record_memory_history(enabled=None))


def memory_snapshot(step: int, path: str | Path, *, torch_module: Any = None) -> Path | None:
    """Write a snapshot that https://pytorch.org/memory_viz opens: to ``path`` (a ``.pickle``), or a directory as
    ``memory_snapshot_step<step>.pickle``. The file, or ``None`` without CUDA or on failure (never raises)."""
    torch, reason = _cuda_ready(torch_module)
    if reason is not None:
        return None
    target = Path(path)
    try:
        if target.suffix != ".pickle":
            target = target / f"memory_snapshot_step{step}.pickle"
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(target))
    except Exception:  # noqa: BLE001
        return None
    return target
