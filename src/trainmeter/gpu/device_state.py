"""One sampled GPU's bookkeeping: latest sample, bounded history, running means, errors and its deadline grid.

Owned by :class:`~trainmeter.gpu.sampler.GpuSampler`, which holds its lock around every method here. Readings NVIDIA
documents as wrong are screened before they are counted, never a silent zero: profiling counters reading 0 while
GPU-Util reads 100% (DCGM, after an Xid) are no reading (docs/spec.md section 8; :func:`screen` is pure).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from trainmeter.gpu.backend import NUMERIC_FIELDS, GpuSample

MAX_ERROR_CHARS = 300
BUSY_UTIL = 0.95
ACTIVITY_FIELDS: tuple[str, ...] = ("sm_activity", "sm_occupancy", "tensor_activity", "hmma_activity", "dram_bw_util")
REASON_COUNTERS_STUCK = (
    "the profiling counters read 0 while GPU-Util reads 100%, which NVIDIA's DCGM documents after a GPU fault "
    "(an Xid): not a reading; a GPU reset clears it")


def counters_stuck(sample: GpuSample, previous: GpuSample | None) -> bool:
    """GPU-Util busy at this and the previous sample while every activity counter present reads exactly 0."""
    ends = (sample.util_gpu, previous.util_gpu if previous is not None else None)
    if any(u is None or u < BUSY_UTIL for u in ends) or sample.sm_activity is None:
        return False
    return all(getattr(sample, f) in (None, 0.0) for f in ACTIVITY_FIELDS)


def screen(sample: GpuSample, previous: GpuSample | None) -> GpuSample:
    """The sample with counters that cannot be readings set to ``None`` and a reason each; else unchanged
    (``previous``: the device's previous sample, the start of the GPM window)."""
    if not counters_stuck(sample, previous):
        return sample
    cleared = {f: None for f in ACTIVITY_FIELDS if getattr(sample, f) is not None}
    unavailable = tuple((k, v) for k, v in sample.unavailable if k not in cleared)
    unavailable += tuple((f, REASON_COUNTERS_STUCK) for f in cleared)
    return replace(sample, unavailable=unavailable, **cleared)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDeviceStatus:
    """Sampling health of one device: still ``active``, successful samples, failed calls, the latest failure's text,
    why sampling stopped (``None`` while active), the latest backend call's duration in seconds."""

    index: int
    active: bool
    n_samples: int
    n_errors: int
    last_error: str | None
    stopped_reason: str | None
    last_call_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuAverages:
    """Per-sample means of one device's numeric readings over a span (``start_s`` to ``end_s``, clock seconds); read
    as attributes too (``avg.sm_activity``), so averages feed the ladder like a sample. ``mem_used_peak_bytes``: the
    highest seen (not reduced by ``end_window``); ``unavailable``: ``(field, reason)`` for fields with no value."""

    index: int
    n_samples: int
    start_s: float | None
    end_s: float | None
    mem_used_peak_bytes: int | None
    means: Mapping[str, float | None] = field(default_factory=dict)
    unavailable: tuple[tuple[str, str], ...] = ()

    def __getattr__(self, name: str) -> Any:
        if name in NUMERIC_FIELDS:
            return self.means.get(name)
        raise AttributeError(name)

    def unavailable_reason(self, name: str) -> str | None:
        """Why field ``name`` has no mean, or ``None``."""
        return dict(self.unavailable).get(name)


@dataclass(slots=True)
class Accumulator:
    """Sums and counts per numeric field; ``add(s, sign=-1)`` takes a sample back out."""

    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(NUMERIC_FIELDS, 0.0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NUMERIC_FIELDS, 0))
    reasons: dict[str, str] = field(default_factory=dict)
    n: int = 0
    first_s: float | None = None
    last_s: float | None = None
    peak_mem: int | None = None

    def add(self, s: GpuSample, sign: int = 1) -> None:
        self.n += sign
        for name in NUMERIC_FIELDS:
            value = getattr(s, name)
            if value is not None and math.isfinite(value):
                self.sums[name] += sign * value
                self.counts[name] += sign
        if sign > 0:
            self.reasons.update(s.unavailable)
            self.first_s = s.t_s if self.first_s is None else self.first_s
            self.last_s = s.t_s
            if s.mem_used_bytes is not None:
                self.peak_mem = max(self.peak_mem or 0, s.mem_used_bytes)

    def result(self, index: int) -> GpuAverages:
        means = {k: (self.sums[k] / c if (c := self.counts[k]) > 0 else None) for k in NUMERIC_FIELDS}
        missing = tuple((k, r) for k, r in self.reasons.items() if means.get(k) is None)
        return GpuAverages(index=index, n_samples=self.n, start_s=self.first_s, end_s=self.last_s,
                           mem_used_peak_bytes=self.peak_mem, means=means, unavailable=missing)


class DeviceState:
    """Mutable per-device state; guarded by the sampler's lock."""

    def __init__(self, index: int, history_len: int) -> None:
        self.index = index
        self.active = True
        self.latest: GpuSample | None = None
        self.history: deque[GpuSample] = deque(maxlen=history_len)
        self.all = Accumulator()
        self.window = Accumulator()
        self.next_due_s: float | None = None
        self.n_errors = 0
        self.n_consecutive_errors = 0
        self.last_error: str | None = None
        self.stopped_reason: str | None = None
        self.last_call_s: float | None = None

    def claim(self, now_s: float, interval_s: float) -> bool:
        """Whether the device is due at ``now_s``; if so its next deadline moves on one interval."""
        due = self.next_due_s is None or now_s >= self.next_due_s
        if due:
            self.next_due_s = next_due(self.next_due_s, now_s, interval_s)
        return due

    def take(self, sample: GpuSample, call_s: float, in_window: bool) -> None:
        """Count one successful sample (and in the window when it falls in it), screened (:func:`screen`) first."""
        sample = screen(sample, self.latest)
        self.last_call_s = call_s
        self.latest = sample
        self.history.append(sample)
        self.all.add(sample)
        self.n_consecutive_errors = 0
        if in_window:
            self.window.add(sample)

    def fail(self, text: str, *, fatal: bool, max_errors: int, call_s: float | None) -> None:
        """Count one failed sample; a fatal one or ``max_errors`` in a row stop the device."""
        self.n_errors += 1
        self.n_consecutive_errors += 1
        self.last_error = text[:MAX_ERROR_CHARS]
        self.last_call_s = call_s if call_s is not None else self.last_call_s
        if fatal or self.n_consecutive_errors >= max_errors:
            self.active = False
            self.stopped_reason = (self.last_error if fatal else
                                   f"{self.n_consecutive_errors} failures in a row; last: {self.last_error}")

    def close_window(self, begin_s: float, prev_end_s: float | None, end_s: float) -> None:
        """Close the window at ``end_s``: samples counted past it are taken back out while still in the history."""
        for s in self.history:
            counted = s.t_s >= begin_s and (prev_end_s is None or s.t_s <= prev_end_s)
            if counted and s.t_s > end_s:
                self.window.add(s, sign=-1)
        self.window.last_s = max((s.t_s for s in self.history if begin_s <= s.t_s <= end_s), default=self.window.last_s)

    def status(self) -> GpuDeviceStatus:
        """The device's sampling health."""
        kept = {f.name: getattr(self, f.name) for f in fields(GpuDeviceStatus) if f.name != "n_samples"}
        return GpuDeviceStatus(n_samples=self.all.n, **kept)


def next_due(prev_due: float | None, now_s: float, interval_s: float) -> float:
    """The first deadline on ``prev_due``'s ``interval_s`` grid after it that is later than ``now_s`` (missed ticks
    skipped); ``None``: one interval from now."""
    if prev_due is None:
        return now_s + interval_s
    due = prev_due + max(1, math.floor((now_s - prev_due) / interval_s) + 1) * interval_s
    return due if due > now_s else due + interval_s  # a rounding that landed on now_s
