"""Running means of GPU samples: :class:`GpuAverages` and its accumulator.

Used by :mod:`trainmeter.gpu.sampler` (under its lock; not thread-safe on its own).
Means are per sample (the sampler samples at a fixed interval), over samples that have
the field; a field never seen keeps the last reason it was missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmeter.gpu.backend import NUMERIC_FIELDS, GpuSample


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuAverages:
    """Per-sample means of one device's readings over a span.

    ``means`` maps each numeric :class:`~trainmeter.gpu.backend.GpuSample` field to its
    mean over the samples that had it (``None`` if none had it); attribute access works
    too (``avg.sm_activity``), so a :class:`GpuAverages` can feed the ladder like a sample.

    Attributes:
        index: NVML index.
        n_samples: Samples counted.
        start_s: Time of the first counted sample (clock seconds) or ``None``.
        end_s: Time of the last counted sample or ``None``.
        mem_used_peak_bytes: Highest ``mem_used_bytes`` seen (not reduced by
            :meth:`GpuSampler.end_window`).
        means: Field name -> mean (units as in ``GpuSample``) or ``None``.
        unavailable: ``(field, reason)`` for fields with no value in the span.
    """

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


class Accumulator:
    """Sums and counts per numeric field; ``add(s, sign=-1)`` takes a sample back out."""

    __slots__ = ("counts", "first_s", "last_s", "n", "peak_mem", "reasons", "sums")

    def __init__(self) -> None:
        self.sums = dict.fromkeys(NUMERIC_FIELDS, 0.0)
        self.counts = dict.fromkeys(NUMERIC_FIELDS, 0)
        self.reasons: dict[str, str] = {}
        self.n = 0
        self.first_s: float | None = None
        self.last_s: float | None = None
        self.peak_mem: int | None = None

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
        return GpuAverages(
            index=index,
            n_samples=self.n,
            start_s=self.first_s,
            end_s=self.last_s,
            mem_used_peak_bytes=self.peak_mem,
            means=means,
            unavailable=missing,
        )
