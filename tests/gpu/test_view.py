"""GpuView: the GPU wing's readings as the other wings see them."""

from __future__ import annotations

from types import SimpleNamespace

from trainmeter.gpu.sampler import REASON_OPENING
from trainmeter.gpu.view import GpuView


def test_opening_is_true_only_while_nvml_is_being_opened_on_the_samplers_thread():
    assert GpuView(readings=SimpleNamespace(unavailable_reason=REASON_OPENING), opens_in_background=True).opening()
    assert not GpuView(readings=SimpleNamespace(unavailable_reason=None), opens_in_background=True).opening()
    assert not GpuView().opening()


def test_the_gpu_extension_publishes_its_sampler_and_its_last_section(tmp_path):
    from trainmeter.core.clock import FakeClock
    from trainmeter.extensions import make_monitor
    from trainmeter.gpu.extension import GpuExtension
    from trainmeter.options import make_options

    ext = GpuExtension(open_backend=lambda **_: SimpleNamespace(backend=None, reason="no NVML here"))
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=FakeClock(0.0), text=False,
                     probes=False, extensions=[ext]).start()
    view = m.extension("gpu")
    assert view.readings is ext.sampler and view.opens_in_background and view.section is None
    m.finish("completed")
    assert m.extension("gpu").section == ext.section is not None
