"""Item 4: a slow or hung NVML or psutil never blocks the training thread.

NVML is opened, sampled and closed on the sampler's own threads; psutil is
imported and read on the node thread; the training thread waits at most a
bounded join at the end, then leaves the stuck thread with a reason. Slow
calls are the fake NVML's ``slow`` fault (5 s) and calls that hang until the
test releases them.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.gpu.fake import FakeNvml, open_fake
from trainmeter.core.clock import MonotonicClock
from trainmeter.extensions import make_monitor
from trainmeter.gpu.extension import GpuExtension
from trainmeter.host.extension import NodeSampler
from trainmeter.options import make_options

MAIN = threading.main_thread()


@pytest.fixture
def release():
    """Hung calls wait on this; set at teardown so no thread outlives the test for long."""
    event = threading.Event()
    yield event
    event.set()


def _cell(run_root, extensions, steps=20, during=None, *, baseline=True) -> float:
    """Run a monitored 'cell' of ``steps`` steps; return the wall seconds ``extensions`` add to it from start to
    finish (less ``during``): the same cell without them is timed first (a busy machine slows both alike)."""
    base_s = _cell(run_root, [], steps, baseline=False) if baseline else 0.0
    m = make_monitor(make_options(run_dir=run_root, name="hung", interval_s=0.1), text=False, probes=False,
                     extensions=extensions)
    t0 = time.perf_counter()
    m.start()
    for _ in range(steps):
        m.on_step(10)
    waited_s = 0.0
    if during is not None:
        w0 = time.perf_counter()
        during()
        waited_s = time.perf_counter() - w0
    m.finish("completed")
    return time.perf_counter() - t0 - waited_s - base_s


@pytest.mark.parametrize("delay_s", [5.0, 30.0])
def test_slow_or_hung_nvml_samples_add_under_a_second_to_the_cell(run_root, release, delay_s):
    callers: list[threading.Thread] = []

    def open_backend(clock):
        callers.append(threading.current_thread())
        fake = FakeNvml(["h100_sxm"], clock=MonotonicClock(), sleep=lambda s: release.wait(s))
        fake.inject(0, "slow", delay_s=delay_s)
        return open_fake(fake)

    ext = GpuExtension(open_backend=open_backend)
    added_s = _cell(run_root, [ext])
    assert added_s < 1.0
    assert callers and all(t is not MAIN for t in callers)  # opened off the training thread


def test_a_hung_nvml_open_adds_under_a_second_and_the_reason_is_recorded(run_root, release):
    def open_backend(clock):
        release.wait(60)
        return open_fake(FakeNvml(["h100_sxm"], clock=clock))

    ext = GpuExtension(open_backend=open_backend)
    assert _cell(run_root, [ext]) < 1.0
    assert ext.sampler.abandoned_reason is not None and "did not stop" in ext.sampler.abandoned_reason


def test_a_hung_sample_at_stop_is_abandoned_with_a_reason_and_close_never_runs_on_the_training_thread(
        run_root, release):
    closers: list[threading.Thread] = []
    fake = FakeNvml(["h100_sxm"], clock=MonotonicClock(), sleep=lambda s: release.wait(s))
    real_close = fake.close

    def close():
        closers.append(threading.current_thread())
        real_close()

    fake.close = close
    fake.inject(0, "slow", delay_s=30.0)
    ext = GpuExtension(open_backend=lambda clock: open_fake(fake))

    def until_a_call_hangs():
        # two calls begun: the sampling thread's first sample and the owner's energy-counter read (both hang)
        deadline = time.monotonic() + 10
        while fake._devices[0].calls < 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    assert _cell(run_root, [ext], steps=5, during=until_a_call_hangs) < 1.0
    (status,) = ext.sampler.status().values()
    assert status.stopped_reason is not None and "hung" in status.stopped_reason
    assert all(t is not MAIN for t in closers)


class HungSource:
    """A psutil-like source whose every call waits on ``release`` (or takes ``delay_s``)."""

    def __init__(self, release: threading.Event, delay_s: float = 60.0) -> None:
        self.release = release
        self.delay_s = delay_s
        self.callers: list[threading.Thread] = []

    def _call(self, value):
        self.callers.append(threading.current_thread())
        self.release.wait(self.delay_s)
        return value

    def cpu_times(self, percpu=False):
        return self._call([])

    def getloadavg(self):
        return self._call((0.0, 0.0, 0.0))

    def virtual_memory(self):
        return self._call(None)

    def swap_memory(self):
        return self._call(None)

    def disk_io_counters(self, perdisk=False):
        return self._call(None)

    def disk_usage(self, path):
        return self._call(None)

    def net_io_counters(self, pernic=False):
        return self._call({})


@pytest.mark.parametrize("delay_s", [5.0, 60.0])
def test_slow_or_hung_psutil_never_runs_on_the_training_thread(run_root, release, delay_s):
    source = HungSource(release, delay_s)
    node = NodeSampler(source)
    assert _cell(run_root, [node]) < 1.0
    assert all(t is not MAIN for t in source.callers)
    assert node.abandoned_reason is not None
