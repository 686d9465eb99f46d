"""Allocator memory readings and memory snapshots, with a fake torch and the real CPU torch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainmeter.gpu.cuda_memory import (
    REASON_NO_CUDA,
    REASON_NO_TORCH,
    REASON_NOT_INITIALISED,
    AllocatorMemoryReader,
    memory_snapshot,
    start_memory_history,
    stop_memory_history,
)

GIB = 1024**3


class FakeCuda:
    def __init__(self) -> None:
        self.peak_allocated = 5 * GIB
        self.peak_reserved = 7 * GIB
        self.resets: list[int] = []
        self.history: list[dict[str, Any]] = []
        self.dumped: list[str] = []
        self.memory = SimpleNamespace(
            _record_memory_history=lambda **kw: self.history.append(kw),
            _dump_snapshot=lambda path: (self.dumped.append(path), Path(path).write_bytes(b"snap")),
        )

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return 1

    def memory_stats(self, index: int) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": 4 * GIB,
            "reserved_bytes.all.current": 6 * GIB,
            "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.peak": self.peak_reserved,
            "num_alloc_retries": 2,
            "num_ooms": 1,
        }

    def get_device_properties(self, index: int) -> Any:
        return SimpleNamespace(total_memory=80 * GIB)

    def reset_peak_memory_stats(self, index: int) -> None:
        self.resets.append(index)
        self.peak_allocated, self.peak_reserved = 4 * GIB, 6 * GIB


def _torch() -> tuple[Any, FakeCuda]:
    cuda = FakeCuda()
    return SimpleNamespace(cuda=cuda), cuda


def test_reading_reports_allocated_reserved_peaks_retries_and_ooms() -> None:
    torch, cuda = _torch()
    m = AllocatorMemoryReader(torch_module=torch).read()
    assert m.device_index == 1 and m.reason is None
    assert (m.allocated_bytes, m.reserved_bytes) == (4 * GIB, 6 * GIB)
    assert (m.peak_allocated_bytes, m.peak_reserved_bytes) == (5 * GIB, 7 * GIB)
    assert (m.num_alloc_retries, m.num_ooms) == (2, 1)
    assert m.device_total_bytes == 80 * GIB and m.headroom_bytes == 73 * GIB


def test_peak_is_reset_after_each_reading_so_it_covers_one_interval() -> None:
    torch, cuda = _torch()
    reader = AllocatorMemoryReader(0, torch_module=torch)
    assert reader.read().peak_reserved_bytes == 7 * GIB
    assert reader.read().peak_reserved_bytes == 6 * GIB
    assert cuda.resets == [0, 0]


def test_reset_can_be_disabled() -> None:
    torch, cuda = _torch()
    AllocatorMemoryReader(0, torch_module=torch, reset_peaks=False).read()
    assert cuda.resets == []


def test_without_cuda_fields_are_none_with_reason() -> None:
    m = AllocatorMemoryReader(torch_module=None).read()  # torch may be imported; real CPU build
    assert m.allocated_bytes is None and m.reason in (REASON_NO_TORCH, REASON_NO_CUDA)
    import torch

    m = AllocatorMemoryReader(torch_module=torch).read()
    assert m.reason == REASON_NO_CUDA and m.headroom_bytes is None


def test_cuda_not_initialised_is_not_initialised_by_the_reader() -> None:
    torch, cuda = _torch()
    cuda.is_initialized = lambda: False  # type: ignore[method-assign]
    assert AllocatorMemoryReader(torch_module=torch).read().reason == REASON_NOT_INITIALISED


def test_stats_failure_becomes_reason_not_exception() -> None:
    torch, cuda = _torch()
    cuda.memory_stats = lambda index: 1 / 0  # type: ignore[method-assign]
    assert "memory_stats failed" in (AllocatorMemoryReader(torch_module=torch).read().reason or "")


def test_memory_snapshot_writes_file_named_for_step(tmp_path: Path) -> None:
    torch, cuda = _torch()
    assert start_memory_history(torch_module=torch, max_entries=10) is None
    out = memory_snapshot(120, tmp_path / "snaps", torch_module=torch)
    assert out == tmp_path / "snaps" / "memory_snapshot_step120.pickle" and out.read_bytes() == b"snap"
    explicit = memory_snapshot(5, tmp_path / "x.pickle", torch_module=torch)
    assert explicit == tmp_path / "x.pickle"
    stop_memory_history(torch_module=torch)
    assert cuda.history == [{"max_entries": 10}, {"enabled": None}]


def test_memory_snapshot_is_a_no_op_without_cuda(tmp_path: Path) -> None:
    import torch

    assert memory_snapshot(1, tmp_path / "s", torch_module=torch) is None
    assert not (tmp_path / "s").exists()
    assert start_memory_history(torch_module=torch) == REASON_NO_CUDA
    stop_memory_history(torch_module=torch)


def test_snapshot_failure_returns_none(tmp_path: Path) -> None:
    torch, cuda = _torch()
    cuda.memory._dump_snapshot = lambda path: 1 / 0
    assert memory_snapshot(1, tmp_path, torch_module=torch) is None
    cuda.memory._record_memory_history = lambda **kw: 1 / 0
    assert "could not record" in (start_memory_history(torch_module=torch) or "")


def test_monitor_resets_peaks_at_start_and_returns_dicts() -> None:
    from trainmeter.gpu.cuda_memory import CudaMemoryMonitor

    torch, cuda = _torch()
    monitor = CudaMemoryMonitor(0, torch_module=torch)
    assert monitor.available and cuda.resets == [0]
    reading = monitor.sample_interval()
    assert reading["peak_reserved_bytes"] == 6 * GIB and reading["allocated_bytes"] == 4 * GIB
    assert cuda.resets == [0, 0]


def test_monitor_is_unavailable_on_cpu_torch() -> None:
    import torch

    from trainmeter.gpu.cuda_memory import CudaMemoryMonitor

    monitor = CudaMemoryMonitor(torch_module=torch)
    assert not monitor.available and monitor.sample_interval()["reason"] == REASON_NO_CUDA
