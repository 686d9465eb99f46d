"""GPU extension start: NVML opens on the sampler's own thread (``GpuSampler.in_background``, docs/spec.md section 8).

Covered elsewhere: a hung open or a hung sample adds under a second to the cell and
the reason is recorded (``tests/faults/test_hung_drivers.py``).
"""

from __future__ import annotations

import threading

import pytest

from tests.fakes.gpu.fake import FakeNvml, open_fake, rung, sampler_step
from trainmeter.core.clock import FakeClock
from trainmeter.core.extension import Report
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.gpu.extension import GpuExtension
from trainmeter.gpu.sampler import REASON_OPENING
from trainmeter.options import make_options


@pytest.fixture
def release():
    """A slow NVML open waits on this; set at teardown so no thread outlives the test for long."""
    event = threading.Event()
    yield event
    event.set()


def _monitor(tmp_path, ext, **flags):
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False, **flags)
    return make_monitor(options, clock=FakeClock(5.0), text=False, probes=False, extensions=[ext])


def _slow_open(release, fake, opened=None):
    def open_backend(clock):
        release.wait(10.0)  # NVML taking its time
        if opened is not None:
            opened.append(threading.current_thread())
        return open_fake(fake)

    return open_backend


def test_start_returns_before_nvml_has_opened_and_the_window_begins_at_the_start(tmp_path, release):
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))
    opened: list[threading.Thread] = []
    ext = GpuExtension(open_backend=_slow_open(release, fake, opened))
    m = _monitor(tmp_path, ext).start()
    assert ext.sampler.indices == () and ext.sampler.unavailable_reason == REASON_OPENING  # start did not wait
    report = Report(steps=0, tokens=0, elapsed_s=0.0, final=False, phases_s={})
    assert "0" not in ext.on_report(report)  # a report before the open completes has no device yet
    release.set()
    for _ in range(200):
        if ext.sampler.indices:
            break
        threading.Event().wait(0.01)
    assert ext.sampler.indices == (0,)
    assert opened and opened[0] is not threading.current_thread()
    m.clock.advance(2.0)
    m.finish("completed")
    assert ext.sampler._window_begin_s == 5.0  # the run's start, not the moment NVML answered
    ext.sampler._owner.join(10.0)
    assert not any(t.name.startswith("trainmeter-gpu") for t in threading.enumerate())


def test_a_fault_while_opening_warns_once_on_the_training_thread_and_the_run_completes(tmp_path):
    def broken(clock):
        raise RuntimeError("driver gone")

    ext = GpuExtension(open_backend=broken)
    m = _monitor(tmp_path, ext).start()
    ext.sampler._owner.join(10.0)
    with pytest.warns(MonitorWarning, match="GPU sampling off: RuntimeError: driver gone") as caught:
        m.finish("completed")
    assert len([w for w in caught if "driver gone" in str(w.message)]) == 1  # report and stop: once
    assert m.status == "completed" and ext.sampler.indices == ()
    section = ext.passport_section()
    assert section["available"] is False and "driver gone" in str(section)


def test_a_run_that_ends_while_nvml_opens_starts_no_sampling_thread(tmp_path, release):
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))
    ext = GpuExtension(open_backend=_slow_open(release, fake))
    m = _monitor(tmp_path, ext).start()
    m.finish("completed")  # stop() waits a bounded time for the opener, then leaves it
    assert m.status == "completed"
    release.set()
    ext.sampler._owner.join(10.0)
    assert not ext.sampler._owner.is_alive()
    assert ext.sampler.unavailable_reason == "the run ended before NVML opened"
    assert ext.sampler.indices == () and ext.sampler._threads == []
    assert not any(t.name == "trainmeter-gpu-0" for t in threading.enumerate())


def test_a_bad_gpus_selection_is_reported_with_the_valid_values_and_the_run_completes(tmp_path):
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))
    ext = GpuExtension(open_backend=lambda clock: open_fake(fake))
    m = _monitor(tmp_path, ext, gpus="3").start()
    ext.sampler._owner.join(10.0)
    with pytest.warns(MonitorWarning, match="--gpus: there is no GPU 3"):
        m.finish("completed")
    assert m.status == "completed" and ext.sampler.indices == ()
    assert "there is no GPU 3" in ext.sampler.unavailable_reason


@pytest.mark.parametrize(("node_wide", "expected"), [(False, (0,)), (True, (0, 1))])
def test_node_wide_sampling_reads_every_device_of_the_node_not_only_its_own(tmp_path, monkeypatch, node_wide,
                                                                            expected):
    from tests.fakes.gpu.fake import fake_uuid
    from trainmeter.gpu import sampler as sampler_module

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(sampler_module, "cuda_context_uuids", lambda: [fake_uuid(0)])  # this rank uses GPU 0
    fake = FakeNvml(["h100_sxm", "h100_sxm"], clock=FakeClock(5.0))
    ext = GpuExtension(open_backend=lambda clock: open_fake(fake), node_wide=node_wide)
    m = _monitor(tmp_path, ext).start()
    for _ in range(200):
        if ext.sampler.indices:
            break
        threading.Event().wait(0.01)
    assert ext.sampler.indices == expected
    m.clock.advance(2.0)
    m.finish("completed")
    assert [d["uuid"] for d in ext.section["devices"]] == [fake_uuid(i) for i in expected]


class _Compute:
    """The compute wing as far as the GPU wing reads it: its derived figures."""

    name = "compute"
    peak = None

    def __init__(self):
        from trainmeter.core.provenance import Derivation, Input

        inputs = (Input(name="F", value=6e9, unit="FLOP/token", provenance="detected"),
                  Input(name="tokens_per_s", value=1e4, unit="tokens/s", provenance="measured"),
                  Input(name="peak", value=1e14, unit="FLOP/s", provenance="declared"))
        self.derived = {"mfu[hf]": Derivation(name="mfu[hf]", formula="F * tokens_per_s / (devices * peak)",
                                              value=0.6, unit="fraction", inputs=inputs)}

    def start(self, monitor):
        pass

    def view(self):
        from trainmeter.compute.view import ComputeView

        return ComputeView(convention="hf", derived=self.derived)

    def stop(self):
        pass


def test_the_ladders_mfu_rung_takes_the_weakest_provenance_of_the_mfu_derivation(tmp_path):
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(5.0))
    ext = GpuExtension(open_backend=lambda clock: open_fake(fake))
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, convention="hf"),
                     clock=FakeClock(5.0), text=False, probes=False, extensions=[_Compute(), ext]).start()
    for _ in range(200):
        if ext.sampler.indices:
            break
        threading.Event().wait(0.01)
    m.clock.advance(2.0)
    m.finish("completed")
    rung = ext.section["ladder"][0]["rungs"]["mfu"]
    assert rung["value"] == 0.6 and rung["provenance"] == "declared"  # a declared peak, not "counted"


def test_the_ladder_knows_each_device_by_its_index_for_the_dram_peak_and_the_backend_sources():
    from types import SimpleNamespace

    from tests.fakes.gpu.amdsmi_fake import FakeAmdSmi
    from trainmeter.gpu.amdsmi_backend import LADDER_SOURCES, open_amdsmi
    from trainmeter.gpu.sampler import GpuSampler

    clock = FakeClock()
    ext = GpuExtension()
    ext.sampler = GpuSampler(FakeNvml(["h100_sxm"], clock=clock), (0,), clock=clock)
    assert ext.sampler.devices[0].name == "NVIDIA H100 80GB HBM3"  # devices map index -> info
    sampler_step(ext.sampler, clock())
    clock.advance(1.0)
    sampler_step(ext.sampler, clock())
    ext._m = SimpleNamespace(token_unit="tokens", extension=lambda name: None)
    ladder = ext._build(ext.sampler.latest())[0]
    assert ladder.arithmetic_intensity.inputs[2].value is not None  # the H100's DRAM peak was found
    amd = GpuSampler(open_amdsmi(clock=clock, module=FakeAmdSmi()).backend, (0,), clock=clock)
    sampler_step(amd, clock())
    ext.sampler = amd
    ladder = ext._build(amd.latest())[0]
    assert rung(ladder, "gpu_util").source == LADDER_SOURCES["gpu_util"]
