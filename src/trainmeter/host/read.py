"""Reading a psutil-like source into :class:`NodeSample` records (pure math on counter deltas; docs/spec.md section 10).

What each field is and how it is computed: spec section 10; ``rss_bytes`` is read here so no psutil call runs on the
training thread (section 18). Not thread-safe: one :class:`NodeReader` belongs to one sampling thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SLOW_EVERY = 5  # samples between two reads of the run folder's filesystem (used / (used + free), as df) and sensors
_SKIP_CPU = ("guest", "guest_nice")  # already counted in user and nice
_SKIP_NIC = ("lo", "ifb")  # loopback, and ifb devices mirroring another NIC's traffic


NodeSource = Any
"""The ``psutil`` module or a psutil-like fake: ``cpu_times(percpu=True)``, ``getloadavg``, ``virtual_memory``,
``swap_memory``, ``disk_io_counters``, ``disk_usage(path)``, ``net_io_counters(pernic=True)``; optional ``Process``,
``sensors_temperatures``, ``sensors_fans``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSample:
    """One reading of the node; ``None`` where unavailable (rates: on the first sample). ``t_s``: seconds since the run
    began; shares 0-1, bytes, byte rates since the previous sample, ``(sensor, °C)`` and ``(fan, RPM)`` pairs."""

    t_s: float
    cpu: float | None = None
    cpu_per_core: tuple[float, ...] | None = None
    cpu_core_peak: float | None = None
    load_1m: float | None = None
    load_5m: float | None = None
    load_15m: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    mem_cached_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    disk_read_bytes_per_s: float | None = None
    disk_write_bytes_per_s: float | None = None
    run_fs_total_bytes: int | None = None
    run_fs_free_bytes: int | None = None
    run_fs_used_fraction: float | None = None
    net_rx_bytes_per_s: float | None = None
    net_tx_bytes_per_s: float | None = None
    temperatures_c: tuple[tuple[str, float], ...] | None = None
    temp_max_c: float | None = None
    fans_rpm: tuple[tuple[str, float], ...] | None = None
    fan_max_rpm: float | None = None
    rss_bytes: int | None = None


@dataclass(slots=True)
class _Counters:
    t_s: float
    cpu: list[tuple[float, float]] | None = None  # (busy_s, total_s) per core
    disk: tuple[int, int] | None = None
    net: tuple[int, int] | None = None
    swap_io: int | None = None
    swap_used: int | None = None


def _cpu_pair(times: Any) -> tuple[float, float]:
    values = times._asdict() if hasattr(times, "_asdict") else dict(vars(times))
    total = sum(float(v) for k, v in values.items() if k not in _SKIP_CPU)
    idle = float(values.get("idle", 0.0)) + float(values.get("iowait", 0.0))
    return total - idle, total


def _busy(prev: tuple[float, float], cur: tuple[float, float]) -> float | None:
    d_total = cur[1] - prev[1]
    if d_total <= 0:
        return None
    return min(1.0, max(0.0, (cur[0] - prev[0]) / d_total))


def _sensor_pairs(reading: Any) -> tuple[tuple[str, float], ...] | None:
    return tuple((f"{chip}/{getattr(entry, 'label', '') or i}", float(value))
                 for chip, entries in (reading or {}).items() for i, entry in enumerate(entries)
                 if (value := getattr(entry, "current", None)) is not None and math.isfinite(float(value))) or None


def _int(obj: Any, name: str) -> int | None:
    value = getattr(obj, name, None)
    return int(value) if value is not None else None


class NodeReader:
    """Turns successive reads of a :class:`NodeSource` into :class:`NodeSample` records (``run_dir``: the folder whose
    filesystem fullness is reported). ``swap_growth_bytes``: the largest rise of swap used since the first read;
    ``swap_io_bytes``: swapped in plus out since then; ``failures``: name -> error of readings ``None`` from then on."""

    def __init__(self, source: NodeSource, run_dir: str | None) -> None:
        self._src = source
        self._run_dir = run_dir
        self._prev: _Counters | None = None
        self._first: _Counters | None = None
        self._slow: dict[str, Any] = {}  # the NodeSample fields read every SLOW_EVERY samples, held between
        self._ticks = 0
        self._process: Any = None
        self.failures: dict[str, str] = {}
        self.cpu_count: int | None = None
        self.swap_growth_bytes = 0
        self.swap_io_bytes = 0

    def _field(self, name: str, read: Callable[[], Any]) -> Any:
        if name in self.failures:  # unsupported here: None from now on
            return None
        try:
            return read()
        except Exception as exc:
            self.failures[name] = f"{type(exc).__name__}: {exc}"[:200]
            return None

    def read(self, now_s: float, t_s: float) -> NodeSample:
        """Read the source at clock time ``now_s`` (rates over the time since the last read); ``t_s``, seconds since
        the run began, is stored in the sample."""
        src, prev = self._src, self._prev
        dt_s = now_s - prev.t_s if prev is not None else 0.0
        cur = _Counters(t_s=now_s)
        values: dict[str, Any] = {}
        per_core = self._field("cpu", lambda: src.cpu_times(percpu=True))
        if per_core:
            cur.cpu = [_cpu_pair(t) for t in per_core]
            self.cpu_count = len(cur.cpu)
            values.update(_cpu_shares(prev.cpu if prev is not None else None, cur.cpu))
        load = self._field("load", src.getloadavg)
        if load:
            values.update(load_1m=float(load[0]), load_5m=float(load[1]), load_15m=float(load[2]))
        mem = self._field("mem", src.virtual_memory)
        if mem is not None:
            values.update({f"mem_{k}_bytes": _int(mem, k) for k in ("total", "used", "cached", "available")})
        swap = self._field("swap", src.swap_memory)
        if swap is not None:
            cur.swap_used = _int(swap, "used")
            values.update(swap_total_bytes=_int(swap, "total"), swap_used_bytes=cur.swap_used)
            sin, sout = _int(swap, "sin"), _int(swap, "sout")
            cur.swap_io = sin + sout if sin is not None and sout is not None else None
        disk = self._field("disk", lambda: src.disk_io_counters(perdisk=False))
        if disk is not None:
            cur.disk = (int(disk.read_bytes), int(disk.write_bytes))
        nics = self._field("net", lambda: src.net_io_counters(pernic=True))
        if nics:
            kept = [c for name, c in nics.items() if not str(name).startswith(_SKIP_NIC)]
            cur.net = (sum(int(c.bytes_recv) for c in kept), sum(int(c.bytes_sent) for c in kept))
        if prev is not None:
            for key, i, label in (("disk", 0, "disk_read"), ("disk", 1, "disk_write"),
                                  ("net", 0, "net_rx"), ("net", 1, "net_tx")):
                a, b = getattr(prev, key), getattr(cur, key)  # a counter that went back (reset): no rate
                values[f"{label}_bytes_per_s"] = (b[i] - a[i]) / dt_s if a and b and dt_s > 0 and b[i] >= a[i] else None
        values["rss_bytes"] = self._rss()
        if self._ticks % SLOW_EVERY == 0:
            self._read_slow()
        self._ticks += 1
        values.update(self._slow)
        first = self._first = self._first or cur  # swap growth and paging since the first read
        if cur.swap_used is not None and first.swap_used is not None:
            self.swap_growth_bytes = max(self.swap_growth_bytes, cur.swap_used - first.swap_used)
        if cur.swap_io is not None and first.swap_io is not None:
            self.swap_io_bytes = max(0, cur.swap_io - first.swap_io)
        self._prev = cur
        return NodeSample(t_s=t_s, **values)

    def _rss(self) -> int | None:
        if self._process is None and hasattr(self._src, "Process"):
            self._process = self._field("rss", self._src.Process)
        return _int(self._field("rss", self._process.memory_info) if self._process is not None else None, "rss")

    def read_threads(self) -> dict[int, float] | None:
        """CPU seconds (user + system) per native thread id of this process, or ``None`` when unavailable."""
        rows = self._field("threads", self._process.threads) if self._process is not None else None
        return {int(r.id): float(r.user_time) + float(r.system_time) for r in rows} if rows is not None else None

    def _read_slow(self) -> None:
        src, run_dir, slow = self._src, self._run_dir, self._slow
        usage = self._field("fs", lambda: src.disk_usage(run_dir)) if run_dir is not None else None
        if usage is not None:
            used, free = _int(usage, "used"), _int(usage, "free")
            # used / (used + free) as df: blocks reserved for root count as unavailable
            fraction = used / (used + free) if used is not None and free is not None and used + free > 0 else None
            slow.update(run_fs_total_bytes=_int(usage, "total"), run_fs_free_bytes=free, run_fs_used_fraction=fraction)
        for name, key, peak in (("temps", "temperatures_c", "temp_max_c"), ("fans", "fans_rpm", "fan_max_rpm")):
            read = getattr(src, "sensors_temperatures" if name == "temps" else "sensors_fans", None)
            pairs = _sensor_pairs(self._field(name, read)) if read is not None else None
            slow.update({key: pairs, peak: max(v for _, v in pairs) if pairs else None})


def _cpu_shares(prev: list[tuple[float, float]] | None, cur: list[tuple[float, float]]) -> dict[str, Any]:
    if prev is None or len(prev) != len(cur):
        return {}
    out: dict[str, Any] = {}
    cores = [_busy(p, c) for p, c in zip(prev, cur, strict=True)]
    if cores and all(b is not None for b in cores):
        out["cpu_per_core"] = tuple(cores)
        out["cpu_core_peak"] = max(cores)  # type: ignore[type-var]
    summed = [(sum(p[0] for p in pairs), sum(p[1] for p in pairs)) for pairs in (prev, cur)]
    out["cpu"] = _busy(summed[0], summed[1])
    return out
