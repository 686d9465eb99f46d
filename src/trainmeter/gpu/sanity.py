"""Readings NVIDIA documents as wrong, screened before they are counted: never a silent zero.

Profiling counters reading 0 while GPU-Util reads 100% (DCGM, after an Xid) are no reading: docs/spec.md section 8.
Pure; thread-safe.
"""

from __future__ import annotations

from dataclasses import replace

from trainmeter.gpu.backend import GpuSample

BUSY_UTIL = 0.95
ACTIVITY_FIELDS: tuple[str, ...] = ("sm_activity", "sm_occupancy", "tensor_activity", "hmma_activity", "dram_bw_util")
REASON_COUNTERS_STUCK = (
    "the profiling counters read 0 while GPU-Util reads 100%, which NVIDIA's DCGM documents after a GPU fault "
    "(an Xid): not a reading; a GPU reset clears it"
)


def counters_stuck(sample: GpuSample, previous: GpuSample | None) -> bool:
    """GPU-Util busy at this and the previous sample while every activity counter present reads exactly 0."""
    ends = (sample.util_gpu, previous.util_gpu if previous is not None else None)
    if any(u is None or u < BUSY_UTIL for u in ends) or sample.sm_activity is None:
        return False
    values = [getattr(sample, f) for f in ACTIVITY_FIELDS if getattr(sample, f) is not None]
    return all(v == 0.0 for v in values)


def screen(sample: GpuSample, previous: GpuSample | None) -> GpuSample:
    """The sample with counters that cannot be readings set to ``None`` and a reason each; else unchanged
    (``previous``: the device's previous sample, the start of the GPM window)."""
    if not counters_stuck(sample, previous):
        return sample
    cleared = {f: None for f in ACTIVITY_FIELDS if getattr(sample, f) is not None}
    unavailable = tuple((k, v) for k, v in sample.unavailable if k not in cleared)
    unavailable += tuple((f, REASON_COUNTERS_STUCK) for f in cleared)
    return replace(sample, unavailable=unavailable, **cleared)
