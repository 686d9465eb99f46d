"""Node sampler: counter deltas with a fake psutil-like source, warnings, the thread, real psutil."""

from __future__ import annotations

import json
import threading
import time
from collections import namedtuple
from types import SimpleNamespace

import pytest

from tests.fakes.host import SteppedNodeSampler
from trainmeter.core.clock import FakeClock
from trainmeter.core.faults import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.host.extension import SERIES, NodeSampler
from trainmeter.host.read import NodeSample
from trainmeter.sizes import format_bytes

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
GB = 10**9


class FakeSource:
    """psutil-shaped readings the test moves forward by hand."""

    def __init__(self, *, sensors: bool = False) -> None:
        self.cores = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # per core: busy (user), idle, guest
        self.disk = [0, 0]
        self.nics = {"eth0": [0, 0], "lo": [0, 0]}
        self.mem_used = 4 * GB
        self.swap_used = 0
        self.swap_io = 0
        self.fs_used, self.fs_free = 50 * GB, 50 * GB
        self.fail: set[str] = set()
        if sensors:
            self.sensors_temperatures = lambda: {"coretemp": [SimpleNamespace(label="Package", current=71.0),
                                                              SimpleNamespace(label="Core 0", current=65.0)]}
            self.sensors_fans = lambda: {"dell": [SimpleNamespace(label="cpu", current=2400)]}

    def _check(self, name: str) -> None:
        if name in self.fail:
            raise OSError(f"{name} unsupported")

    def cpu_times(self, percpu: bool = False):
        self._check("cpu")
        return [CpuTimes(busy, 0, 0, idle, 0, 0, 0, 0, guest, 0) for busy, idle, guest in self.cores]

    def getloadavg(self):
        return (1.5, 1.0, 0.5)

    def virtual_memory(self):
        self._check("mem")
        return SimpleNamespace(total=16 * GB, used=self.mem_used, cached=2 * GB, available=10 * GB)

    def swap_memory(self):
        return SimpleNamespace(total=8 * GB, used=self.swap_used, sin=self.swap_io, sout=0)

    def disk_io_counters(self, perdisk: bool = False):
        return SimpleNamespace(read_bytes=self.disk[0], write_bytes=self.disk[1])

    def disk_usage(self, path: str):
        return SimpleNamespace(total=self.fs_used + self.fs_free, used=self.fs_used, free=self.fs_free)

    def net_io_counters(self, pernic: bool = False):
        return {name: SimpleNamespace(bytes_recv=rx, bytes_sent=tx) for name, (rx, tx) in self.nics.items()}


def _start(tmp_path, source, clock):
    from trainmeter.options import make_options

    sampler = SteppedNodeSampler(source)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                extensions=[sampler])
    m.start()
    return m, sampler


def test_cpu_share_comes_from_busy_deltas_and_ignores_guest_time(tmp_path):
    src, clock = FakeSource(), FakeClock(10.0)
    m, sampler = _start(tmp_path, src, clock)
    src.cores = [[0.5, 0.5, 9.0], [1.0, 0.0, 9.0]]  # core 0 half busy, core 1 fully busy; guest counted in user
    clock.advance(1.0)
    sample = sampler.step(clock())
    m.finish("completed")
    assert sample.cpu_per_core == (0.5, 1.0)
    assert sample.cpu == pytest.approx(0.75)
    assert sample.cpu_core_peak == 1.0
    assert sample.load_1m == 1.5 and sample.load_15m == 0.5


def test_rates_are_byte_deltas_over_time_and_skip_loopback(tmp_path):
    src, clock = FakeSource(), FakeClock(10.0)
    m, sampler = _start(tmp_path, src, clock)
    first = sampler.latest
    src.disk = [2_000_000, 500_000]
    src.nics = {"eth0": [3000, 1000], "lo": [10**9, 10**9]}
    clock.advance(2.0)
    sample = sampler.step(clock())
    m.finish("completed")
    assert first.disk_read_bytes_per_s is None and first.cpu is None  # no rate on the first sample
    assert sample.disk_read_bytes_per_s == pytest.approx(1_000_000)
    assert sample.disk_write_bytes_per_s == pytest.approx(250_000)
    assert sample.net_rx_bytes_per_s == pytest.approx(1500) and sample.net_tx_bytes_per_s == pytest.approx(500)
    assert m.series[SERIES["disk_read_bytes_per_s"]].stats().last == pytest.approx(1_000_000)
    assert m.series[SERIES["mem_used_bytes"]].x_kind == "time"


def test_passport_keeps_mean_and_peak(tmp_path):
    src, clock = FakeSource(sensors=True), FakeClock(10.0)
    m, sampler = _start(tmp_path, src, clock)
    for used in (6 * GB, 8 * GB):
        src.mem_used = used
        clock.advance(1.0)
        sampler.step(clock())
    m.finish("completed")
    node = json.loads((m.run_dir / "passport.json").read_text())["node"]
    assert node["samples"] == 3
    assert node["mem_used_bytes"] == {"mean": pytest.approx(6 * GB), "peak": 8 * GB}
    assert node["temp_max_c"]["peak"] == 71.0 and node["fan_max_rpm"]["peak"] == 2400
    assert node["run_fs_used_fraction"]["peak"] == pytest.approx(0.5)
    assert node["mem_total_bytes"] == 16 * GB and node["cpu_count"] == 2
    assert node["warnings"] == []


def test_temperatures_and_fans_are_none_where_not_exposed(tmp_path):
    m, sampler = _start(tmp_path, FakeSource(sensors=False), FakeClock())
    sample = sampler.latest
    rows = {r["label"]: r for r in sampler.panels()[0]["rows"]}
    m.finish("completed")
    assert sample.temperatures_c is None and sample.temp_max_c is None and sample.fan_max_rpm is None
    assert rows["Hottest sensor"]["value"] is None and rows["Hottest sensor"]["note"] == "not exposed here"
    assert rows["Memory used"]["note"] == f"of {format_bytes(sample.mem_total_bytes)}"  # as the value beside it


def test_warns_when_the_run_folder_disk_is_over_95_percent_full(tmp_path):
    src = FakeSource()
    src.fs_used, src.fs_free = 96 * GB, 4 * GB
    m, sampler = _start(tmp_path, src, FakeClock())
    warnings = sampler.warnings()
    m.finish("completed")
    assert len(warnings) == 1 and warnings[0].startswith("the run folder's filesystem is 96% full (3.7 GiB free)")


def test_warns_when_swap_grows_during_the_run_but_not_for_old_swap(tmp_path):
    src, clock = FakeSource(), FakeClock()
    src.swap_used = 2 * GB  # swapped before the run: no warning
    m, sampler = _start(tmp_path, src, clock)
    clock.advance(1.0)
    sampler.step(clock())
    assert sampler.warnings() == []
    src.swap_used += 100 * 2**20
    clock.advance(1.0)
    sampler.step(clock())
    warnings = sampler.warnings()
    m.finish("completed")
    assert len(warnings) == 1 and warnings[0].startswith("swap in use")


def test_a_failing_reading_gives_none_warns_once_each_and_the_rest_still_samples(tmp_path):
    src, clock = FakeSource(), FakeClock()
    src.fail = {"mem"}
    with pytest.warns(MonitorWarning) as said:
        m, sampler = _start(tmp_path, src, clock)
        src.fail = {"mem", "cpu"}
        src.disk = [1000, 0]
        clock.advance(1.0)
        sample = sampler.step(clock())
        m.finish("completed")
    assert len(said) == 2
    assert sample.mem_used_bytes is None and sample.cpu is None
    assert sample.disk_read_bytes_per_s == pytest.approx(1000)
    # each failing reading is said once (psutil failures were once silent)
    assert sorted(w.split("'")[1] for w in m.warnings) == ["cpu", "mem"]


def test_thread_samples_in_background_and_stops_at_once(tmp_path):
    from trainmeter.options import make_options

    sampler = NodeSampler(FakeSource(), period_s=0.01)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=FakeClock(), text=False, probes=False,
                extensions=[sampler]).start()
    deadline = time.monotonic() + 5.0
    while sampler.samples < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sampler.samples >= 4
    slow = NodeSampler(FakeSource(), period_s=60.0)
    slow.start(m)
    t0 = time.monotonic()
    slow.stop()
    assert time.monotonic() - t0 < 5.0  # not the 60 s period waited out, even on a busy machine
    m.finish("completed")
    assert not any(t.name == "trainmeter-node" for t in threading.enumerate())


def test_real_psutil_fields_are_numbers_or_none(tmp_path):
    pytest.importorskip("psutil")
    clock = FakeClock()
    m, sampler = _start(tmp_path, None, clock)
    clock.advance(1.0)
    sample = sampler.step(clock())
    rows = sampler.panels()[0]["rows"]
    m.finish("completed")
    for name in NodeSample.__dataclass_fields__:
        value = getattr(sample, name)
        if name in ("cpu_per_core", "temperatures_c", "fans_rpm"):
            assert value is None or isinstance(value, tuple)
        else:
            assert value is None or isinstance(value, (int, float)), name
    assert sample.mem_total_bytes > 0
    assert sample.cpu is None or 0.0 <= sample.cpu <= 1.0  # None when no CPU tick passed between the reads
    assert all(r["value"] is None or isinstance(r["value"], (int, float, str)) for r in rows)
