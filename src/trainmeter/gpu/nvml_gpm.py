"""GPM (Hopper+) for the NVML backend: two rotating samples per device (or per MIG GPU instance).

The first tick only primes the pair; one within 100 ms of the previous repeats its values (docs/spec.md section 8).
``pynvml`` is passed in. Thread safety: none; the caller holds the device's lock.
"""

from __future__ import annotations

import math
from typing import Any

from trainmeter.gpu.backend import GPM_FIELDS, GPM_METRICS, REASON_GPM_FIRST_SAMPLE, reason_not_supported, safe

GPM_MIN_INTERVAL_S = 0.1  # nvml.h: the interval between two GPM samples "should be greater than 100ms"

GpmResult = tuple[dict[str, float], dict[str, str], "float | None"]  # (values, reasons by field, window_s)


def all_missing(reason: str) -> GpmResult:
    """Every GPM field ``None`` with ``reason``."""
    return {}, dict.fromkeys(GPM_FIELDS, reason), None


class GpmPair:
    """The two GPM sample buffers of one device (``handle``), used ping-pong; ``gpu_instance_id``: a MIG GPU instance
    of it (``nvmlGpmMigSampleGet``), ``None`` for the whole device."""

    def __init__(self, nv: Any, handle: Any, gpu_instance_id: int | None = None) -> None:
        self._nv = nv
        self._handle = handle
        self._gi = gpu_instance_id
        self._bufs: list[Any] = []
        self._struct: Any = None
        self._t_prev: float | None = None
        self._last: GpmResult = ({}, {}, None)

    def read(self, now_s: float) -> GpmResult:
        """One tick at ``now_s``; a GPM call's ``pynvml.NVMLError`` is raised for the caller to map."""
        nv = self._nv
        if not self._bufs:
            self._bufs = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            self._struct = nv.c_nvmlGpmMetricsGet_t()
        if self._t_prev is None:
            self._sample(self._bufs[0])
            self._t_prev = now_s
            return all_missing(REASON_GPM_FIRST_SAMPLE)
        window_s = now_s - self._t_prev
        if window_s < GPM_MIN_INTERVAL_S:
            return self._last
        self._sample(self._bufs[1])  # bufs[0] holds the older sample
        mg = self._struct
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRICS)
        mg.sample1, mg.sample2 = self._bufs
        for i, (metric_id, _, _) in enumerate(GPM_METRICS):
            mg.metrics[i].metricId = metric_id
            mg.metrics[i].nvmlReturn = 0
            mg.metrics[i].value = 0.0
        nv.nvmlGpmMetricsGet(mg)
        self._t_prev = now_s
        self._bufs.reverse()  # ping-pong: the newer sample is the next tick's older one
        self._last = _parse(mg, window_s)
        return self._last

    def _sample(self, buf: Any) -> None:
        if self._gi is None:
            self._nv.nvmlGpmSampleGet(self._handle, buf)
        else:
            self._nv.nvmlGpmMigSampleGet(self._handle, self._gi, buf)

    def restart(self) -> None:
        """Forget the older sample: the next tick primes the pair again."""
        self._t_prev = None

    def free(self) -> None:
        """Free both buffers; never raises."""
        for buf in self._bufs:
            safe(lambda buf=buf: self._nv.nvmlGpmSampleFree(buf))
        self._bufs = []
        self._t_prev = None


def _parse(mg: Any, window_s: float) -> GpmResult:
    values: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for i, (metric_id, fld, scale) in enumerate(GPM_METRICS):
        metric = mg.metrics[i]
        value = float(metric.value)
        if int(metric.nvmlReturn) != 0:
            reasons[fld] = reason_not_supported(f"GPM metric {metric_id}")
        elif not math.isfinite(value):
            reasons[fld] = f"GPM metric {metric_id} not valid for this interval"
        elif scale < 1:  # percent -> fraction, clamped
            values[fld] = min(max(value * scale, 0.0), 1.0)
        else:
            values[fld] = max(value * scale, 0.0)
    return values, reasons, window_s
