"""GpuView: the GPU wing's readings as the other wings see them."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from trainmeter.gpu.sampler import REASON_OPENING
from trainmeter.gpu.view import GpuView


def test_opening_is_true_only_while_nvml_is_being_opened_on_the_samplers_thread():
    assert GpuView(readings=SimpleNamespace(unavailable_reason=REASON_OPENING)).opening()
    assert not GpuView(readings=SimpleNamespace(unavailable_reason=None)).opening()
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
    assert view.readings is ext.sampler and view.section is None
    m.finish("completed")
    assert m.extension("gpu").section == ext.section is not None


def _sampler(devices, **kwargs):
    from tests.fakes.gpu.fake import FakeNvml, open_fake, sampler_for_run
    from trainmeter.core.clock import FakeClock

    clock = FakeClock(0.0)
    fake = FakeNvml(devices, clock=clock)
    return sampler_for_run(clock=clock, open_backend=lambda **_: open_fake(fake), cuda_uuids=None, env={},
                              **kwargs)


def _family_h100(pci_device_id):
    from tests.fakes.gpu.fake import PROFILES

    return dataclasses.replace(PROFILES["h100_sxm"], key="h100_family", name="NVIDIA H100",
                               pci_device_id=pci_device_id)


def test_device_identity_carries_what_nvml_read_on_the_samplers_thread():
    from tests.fakes.gpu.fake import fake_uuid

    view = GpuView(readings=_sampler([_family_h100(0x2330)]))
    ident = view.device_identity()
    assert (ident.index, ident.name, ident.uuid, ident.pci_device_id) == (0, "NVIDIA H100", fake_uuid(0), 0x2330)
    assert ident.mem_total_bytes == 80 * 1024**3
    assert view.device_identity(fake_uuid(0)[4:].upper()) == ident  # torch's UUID: no GPU- prefix


def test_device_identity_is_none_while_opening_for_an_unknown_uuid_and_for_several_devices_without_one():
    from tests.fakes.gpu.fake import fake_uuid

    assert GpuView(readings=SimpleNamespace(unavailable_reason=REASON_OPENING, devices={})).device_identity() is None
    assert GpuView().device_identity("GPU-1") is None
    two = GpuView(readings=_sampler(["h100_sxm", "a100"]))
    assert two.device_identity() is None
    assert two.device_identity("GPU-00000000-0000-0000-0000-000000000000") is None
    assert two.device_identity(fake_uuid(1)).name == "NVIDIA A100-SXM4-40GB"
    assert two.device_identity(fake_uuid(1)).pci_device_id == 0x20B0


def test_a_mig_instances_uuid_gives_its_parent_gpus_identity():
    from tests.fakes.gpu.fake_mig import mig_uuid

    view = GpuView(readings=_sampler(["h100_sxm", "h100_mig_gpm"]))
    parent = view.device_identity(mig_uuid(1, 2)[4:])  # torch prints the UUID without MIG-
    assert parent is not None and parent.index == 1 and parent.pci_device_id == 0x2330
