"""The node around the run: CPU, load, memory, swap, disks, network, temperatures, fans (docs/spec.md section 10).

Extension ``"node"``: a thread samples a :class:`~trainmeter.host.read.NodeSource` about once a second. Thread
safety: the sampler thread is the only writer; readers take a lock or read the latest immutable sample.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from trainmeter.core.clock import Clock, MonotonicClock
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.core.threads import OurThread
from trainmeter.host.read import NodeReader, NodeSample, NodeSource
from trainmeter.sizes import format_bytes

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

DISK_FULL_FRACTION = 0.95
SWAP_WARN_BYTES = 64 * 2**20
MAX_ERRORS = 10
STOP_DEADLINE_S = 0.5
THREADS_EVERY = 5  # samples between two reads of the process's threads' CPU
SERIES = {name: f"node.{name}" for name in ("cpu", "mem_used_bytes", "disk_read_bytes_per_s",
                                            "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")}
STAT_FIELDS = ("cpu", "cpu_core_peak", "load_1m", "mem_used_bytes", "mem_cached_bytes", "mem_available_bytes",
               "swap_used_bytes", "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s",
               "net_tx_bytes_per_s", "run_fs_used_fraction", "temp_max_c", "fan_max_rpm")


@dataclass(slots=True)
class _Stat:
    total: float = 0.0
    count: int = 0
    peak: float | None = None

    def add(self, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        self.total += value
        self.count += 1
        self.peak = value if self.peak is None else max(self.peak, value)

    def to_dict(self) -> dict[str, float | None]:
        return {"mean": self.total / self.count if self.count else None, "peak": self.peak}


class NodeSampler(ExtensionBase):
    """Samples the node in the background (extension ``"node"``): ``source`` psutil-like (default ``psutil``), every
    ``period_s`` seconds by ``wait_clock`` (real time)."""

    name = "node"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)

    def __init__(self, source: NodeSource | None = None, *, period_s: float = 1.0,
                 wait_clock: Clock | None = None) -> None:
        self._source = source
        self.period_s = period_s
        self._wait_clock = wait_clock or MonotonicClock()
        self._monitor: RunContext | None = None
        self._reader: NodeReader | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = 0
        self.abandoned_reason: str | None = None
        self.latest: NodeSample | None = None
        self.samples = 0
        self._stats = {name: _Stat() for name in STAT_FIELDS}

    def start(self, monitor: RunContext) -> None:
        """Start sampling (training thread; returns at once). psutil is read only on the sampler's thread, baseline
        included, but *imported* here first: a fork during the thread's import would leave the child an import lock
        held by a thread it does not have (docs/spec.md, fork safety)."""
        self._monitor = monitor
        if self._source is None:
            with contextlib.suppress(ImportError):
                import psutil  # noqa: F401
        self._thread = OurThread(target=self._run, args=(monitor,), name="trainmeter-node")
        self._thread.start()

    def _open(self, monitor: RunContext) -> bool:
        """Open the source (default psutil) and its reader; ``False`` (said once) without psutil."""
        source = self._source
        if source is None:
            try:
                import psutil as source
            except ImportError:
                monitor.warn_once("node-psutil", "node metrics unavailable: psutil is not installed")
                return False
        self._reader = NodeReader(source, None if monitor.run_dir is None else str(monitor.run_dir))
        return True

    def stop(self, timeout_s: float = STOP_DEADLINE_S) -> None:
        """Stop the thread; wait at most ``timeout_s``, then leave a thread stuck in psutil. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)
            if thread.is_alive():
                self.abandoned_reason = (f"node sampling did not stop within {timeout_s:g} s (a psutil call hung); "
                                         "its thread was left behind")

    def _run(self, monitor: RunContext) -> None:
        if not self._open(monitor):
            return
        self.step(monitor.clock())  # the baseline
        deadline = self._wait_clock() + self.period_s
        while not self._stop.wait(max(0.0, deadline - self._wait_clock())) and self._errors < MAX_ERRORS:
            self.step(monitor.clock())
            deadline += self.period_s
            now = self._wait_clock()
            if deadline < now:  # fell behind: skip missed ticks
                deadline = now + self.period_s

    def step(self, now_s: float) -> NodeSample | None:
        """Read the source once at clock time ``now_s``; record, accumulate, return the sample (``None`` before the
        start opened the source). Never raises."""
        monitor, reader = self._monitor, self._reader
        if monitor is None or reader is None:
            return None
        t_s = monitor.phases.session_elapsed_s(now_s)
        try:
            sample = reader.read(now_s, t_s)
            self._errors = 0
        except Exception as exc:
            self._errors += 1
            monitor.warn_once("node-sample", f"node sampling fault: {exc!r}")
            return None
        for name, error in list(reader.failures.items()):
            monitor.warn_once(f"node-{name}", f"node reading {name!r} unavailable from here on: {error}")
        board = getattr(monitor, "process_memory", None)
        if board is not None:  # the report's RSS (core.memory): read here, never on the training thread
            board.post(sample.rss_bytes, sample.mem_total_bytes)
            if self.samples % THREADS_EVERY == 0:
                board.thread_cpu_s = reader.read_threads()  # the overhead wing's per-thread CPU
        with self._lock:
            self.latest = sample
            self.samples += 1
            for name, stat in self._stats.items():
                stat.add(getattr(sample, name))
        for name, series in SERIES.items():
            if (value := getattr(sample, name)) is not None:
                monitor.record_at(series, t_s, value)
        return sample

    def on_report(self, report: Report) -> dict[str, Any]:
        """Run-log ``interval["node"]``: the latest sample (scalars only)."""
        sample = self.latest
        if sample is None:
            return {}
        return {f.name: getattr(sample, f.name) for f in fields(NodeSample)
                if f.name not in ("cpu_per_core", "temperatures_c", "fans_rpm", "rss_bytes")}

    def passport_section(self) -> dict[str, Any]:
        """``passport.json["node"]``: mean and peak of each reading over the run."""
        reader = self._reader
        with self._lock:
            sample = self.latest
            stats = {name: stat.to_dict() for name, stat in self._stats.items()}
        return {
            "samples": self.samples, "period_s": self.period_s, "cpu_count": getattr(reader, "cpu_count", None),
            **{k: getattr(sample, k, None) for k in ("mem_total_bytes", "swap_total_bytes", "run_fs_total_bytes")},
            **{k: getattr(reader, k, None) for k in ("swap_growth_bytes", "swap_io_bytes")},
            **stats, "warnings": self.warnings(), "abandoned": self.abandoned_reason,
        }

    def warnings(self) -> list[str]:
        """Run folder's filesystem above 95% full; swap growing or paging during the run."""
        sample, reader, out = self.latest, self._reader, []
        if sample is None or reader is None:
            return out
        used = sample.run_fs_used_fraction
        if used is not None and used > DISK_FULL_FRACTION:
            out.append(f"the run folder's filesystem is {used * 100:.0f}% full ({_gb(sample.run_fs_free_bytes)} "
                       "free): logs and checkpoints may fail to write")
        if max(reader.swap_growth_bytes, reader.swap_io_bytes) >= SWAP_WARN_BYTES:
            out.append(f"swap in use ({_gb(sample.swap_used_bytes)} used, {_gb(reader.swap_io_bytes)} paged during "
                       "the run): host memory is short and the loop may slow down")
        return out

    def panels(self) -> list[dict[str, Any]]:
        """The "Node" panel from the latest sample (publisher thread)."""
        s = self.latest
        if s is None:
            return []
        cores = s.cpu_per_core
        rows = [
            _row("CPU", s.cpu, "fraction", f"{len(s.cpu_per_core)} cores" if s.cpu_per_core else None),
            _row("Busiest core", s.cpu_core_peak, "fraction",
                 f"{sum(1 for c in cores if c > 0.5)} of {len(cores)} cores above 50%" if cores else None),
            _row("Load (1, 5, 15 min)", s.load_1m, "",
                 f"{s.load_5m:.2f}, {s.load_15m:.2f}" if s.load_5m is not None and s.load_15m is not None else None),
            _row("Memory used", s.mem_used_bytes, "bytes", f"of {_gb(s.mem_total_bytes)}"),
            _row("Memory cached", s.mem_cached_bytes, "bytes"),
            _row("Memory available", s.mem_available_bytes, "bytes"),
            _row("Swap used", s.swap_used_bytes, "bytes", f"of {_gb(s.swap_total_bytes)}"),
            _row("Disk read", _per_s(s.disk_read_bytes_per_s), ""),
            _row("Disk write", _per_s(s.disk_write_bytes_per_s), ""),
            _row("Run folder disk", s.run_fs_used_fraction, "fraction", f"{_gb(s.run_fs_free_bytes)} free"),
            _row("Network in", _per_s(s.net_rx_bytes_per_s), ""),
            _row("Network out", _per_s(s.net_tx_bytes_per_s), ""),
            _row("Hottest sensor", s.temp_max_c, "°C", None if s.temperatures_c else "not exposed here"),
            _row("Fastest fan", s.fan_max_rpm, "RPM", None if s.fans_rpm else "not exposed here"),
        ]
        return [{"id": "node", "title": "Node", "rows": rows, "note": f"sampled every {self.period_s:g} s"}]

    def charts(self) -> list[dict[str, Any]]:
        """CPU, memory and I/O over time."""
        names = list(SERIES.values())  # cpu, memory used, then disk and network
        return [{"id": f"node_{key}", "title": title, "x": "time", "unit": unit, "series": series}
                for key, title, unit, series in (("cpu", "Node CPU", "fraction", names[:1]),
                                                 ("mem", "Node memory used", "bytes", names[1:2]),
                                                 ("io", "Disk and network (bytes/s)", "bytes", names[2:]))]


def _row(label: str, value: Any, unit: str, note: str | None = None) -> dict[str, Any]:
    return {"label": label, "value": value, "unit": unit, "provenance": "measured", **({"note": note} if note else {})}


def _gb(value: float | None) -> str:
    return "-" if value is None else format_bytes(value)  # as the row's value beside it


def _per_s(value: float | None) -> str | None:
    if value is None:
        return None
    for div, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if value >= div:
            return f"{value / div:.1f} {unit}"
    return f"{value:.0f} B/s"

