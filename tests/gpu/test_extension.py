"""GPU extension start: NVML opens off the training thread; its faults and an early stop are handled."""

from __future__ import annotations

import threading

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.gpu.extension import GpuExtension
from trainmeter.gpu.fake import FakeNvml, open_fake
from trainmeter.options import make_options


def _monitor(tmp_path, ext, **flags):
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False, **flags)
    return make_monitor(options, clock=FakeClock(5.0), text=False, probes=False, extensions=[ext])


def test_start_returns_before_nvml_has_opened_and_the_window_begins_at_the_start(tmp_path):
    release = threading.Event()
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))

    def slow_open(clock):
        release.wait(10.0)  # NVML taking its time
        return open_fake(fake)

    ext = GpuExtension(open_backend=slow_open)
    m = _monitor(tmp_path, ext).start()
    assert ext.sampler is None  # start() did not wait for the open
    assert ext.interval_fields() == {}  # a report before the open completes has nothing yet
    release.set()
    m.clock.advance(2.0)
    m.finish("completed")
    assert ext.sampler is not None and ext.sampler.indices == (0,)
    assert ext.sampler._window_begin_s == 5.0  # the run's start, not the moment NVML answered
    assert not any(t.name.startswith("trainmeter-gpu") for t in threading.enumerate())


def test_a_fault_while_opening_warns_once_on_the_training_thread_and_the_run_completes(tmp_path):
    def broken(clock):
        raise RuntimeError("driver gone")

    ext = GpuExtension(open_backend=broken)
    m = _monitor(tmp_path, ext).start()
    with pytest.warns(MonitorWarning, match="start-gpu failed and was disabled: RuntimeError"):
        m.finish("completed")
    assert m.status == "completed" and ext.sampler is None
    assert ext.passport_section() == {"available": False, "reason": "GPU sampling did not start"}


def test_a_run_that_ends_while_nvml_opens_starts_no_sampling_thread(tmp_path):
    release = threading.Event()
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))

    def slow_open(clock):
        release.wait(10.0)
        return open_fake(fake)

    ext = GpuExtension(open_backend=slow_open)
    m = _monitor(tmp_path, ext).start()
    with ext._lock:
        ext._stopped = True  # stop() has begun: the opener must not start sampling
    release.set()
    ext._opener.join(10.0)
    assert ext.sampler is None
    m.finish("completed")
    assert not any(t.name == "trainmeter-gpu-0" for t in threading.enumerate())


def test_without_background_a_bad_selection_is_reported_at_start(tmp_path):
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))
    ext = GpuExtension(open_backend=lambda clock: open_fake(fake), background=False)
    with pytest.warns(MonitorWarning, match="start-gpu failed"):
        m = _monitor(tmp_path, ext, gpus="3").start()
    m.finish("completed")
    assert ext.sampler is None
