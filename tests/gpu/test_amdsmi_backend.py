"""The AMD backend over a fake amdsmi: what AMD exposes lands in the sample, what it does not is said so."""

from __future__ import annotations

import pytest

from tests.fakes.gpu.amdsmi_fake import FakeAmdDevice, FakeAmdSmi
from tests.fakes.gpu.fake import rung, sampler_step
from trainmeter.compute.peaks import peak_flops
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.amdsmi_backend import (
    REASON_AMD_NO_ACTIVITY,
    REASON_AMDSMI_MISSING,
    AmdSmiBackend,
    open_amdsmi,
)
from trainmeter.gpu.backend import GPM_FIELDS, GpuUnavailableError
from trainmeter.gpu.ladder import build_ladder
from trainmeter.gpu.sampler import GpuSampler


def _open(fake=None, clock=None):
    result = open_amdsmi(clock=clock or FakeClock(3.0), module=fake or FakeAmdSmi())
    assert result.backend is not None, result.reason
    return result.backend


def test_amdsmi_not_installed_is_a_reason_not_an_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_amdsmi(name, *a, **kw):
        if name == "amdsmi":
            raise ImportError("no amdsmi")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_amdsmi)
    result = open_amdsmi()
    assert result.backend is None and result.reason == REASON_AMDSMI_MISSING


def test_init_failure_and_no_devices_are_reasons():
    assert "amdsmi could not start" in open_amdsmi(module=FakeAmdSmi(init_error="no kfd")).reason
    assert "no AMD GPU" in open_amdsmi(module=FakeAmdSmi(devices=[])).reason


def test_device_info_names_the_card_as_torch_does_and_matches_the_peak_table():
    backend = _open()
    info = backend.device_info(0)
    assert info.name == "AMD Instinct MI300X" and info.uuid.startswith("d1ff")
    assert info.mem_total_bytes == 196_592 * 1024 * 1024
    assert info.gpm_supported is False and info.gpm_reason == REASON_AMD_NO_ACTIVITY
    assert peak_flops(info.name, "bf16").tflops == 1307.4
    assert backend.driver_version() == "6.10.5"


def test_a_sample_carries_gfx_activity_power_memory_clock_and_temperature():
    backend = _open()
    s = backend.sample(0)
    assert s.t_s == 3.0
    assert s.util_gpu == pytest.approx(0.87)
    assert s.power_w == 612  # current socket power N/A: the 1 s average
    assert s.mem_used_bytes == 150_000 * 1024 * 1024
    assert s.sm_clock_mhz == 2100 and s.sm_clock_max_mhz == 2100
    assert s.temperature_c == 71


def test_every_figure_amd_does_not_expose_is_none_with_the_reason():
    s = _open().sample(0)
    for name in GPM_FIELDS:
        assert getattr(s, name) is None and s.unavailable_reason(name) == REASON_AMD_NO_ACTIVITY
    ladder = build_ladder(s, mfu=0.31)
    assert rung(ladder, "tensor_activity").missing == REASON_AMD_NO_ACTIVITY
    assert rung(ladder, "gpu_util").value == pytest.approx(0.87)


def test_a_figure_reported_as_na_or_a_failing_query_is_none_with_its_reason():
    device = FakeAmdDevice(hotspot_c="N/A", edge_c="N/A", gfx_activity="N/A")
    fake = FakeAmdSmi(devices=[device], fail={(0, "amdsmi_get_power_info"): "power sensor busy"})
    s = _open(fake).sample(0)
    assert s.util_gpu is None and "N/A" in s.unavailable_reason("util_gpu")
    assert s.temperature_c is None and "N/A" in s.unavailable_reason("temperature_c")
    assert s.power_w is None and "power sensor busy" in s.unavailable_reason("power_w")
    assert s.sm_clock_mhz == 2100  # the other queries still read


def test_a_gpu_answering_nothing_raises_a_device_error_and_close_is_once():
    calls = ("amdsmi_get_gpu_activity", "amdsmi_get_power_info", "amdsmi_get_gpu_vram_usage",
             "amdsmi_get_clock_info", "amdsmi_get_temp_metric")
    fake = FakeAmdSmi(fail={(0, fn): "GPU hang" for fn in calls})
    backend = _open(fake)
    with pytest.raises(GpuUnavailableError, match="answered no amdsmi query"):
        backend.sample(0)
    backend.close()
    backend.close()
    assert fake.shut_down == 1
    with pytest.raises(GpuUnavailableError):
        backend.sample(0)


def test_energy_is_the_accumulator_times_its_resolution_in_millijoules():
    backend = _open()
    assert backend.total_energy_mj(0) == (pytest.approx(4_000_000 * 15.3 / 1000), None)
    fake = FakeAmdSmi(devices=[FakeAmdDevice(energy_accumulator="N/A")])
    value, why = _open(fake).total_energy_mj(0)
    assert value is None and "N/A" in why


def test_the_sampler_runs_the_amd_backend_like_nvml():
    clock = FakeClock()
    backend = AmdSmiBackend(FakeAmdSmi(devices=[FakeAmdDevice(), FakeAmdDevice(market_name="AMD Instinct MI325X")]),
                            clock=clock)
    s = GpuSampler(backend, (0, 1), clock=clock)
    for _ in range(3):
        sampler_step(s, clock())
        clock.advance(0.5)
    avg = s.averages()[1]
    assert avg.util_gpu == pytest.approx(0.87) and avg.power_w == 612
    assert avg.tensor_activity is None and avg.unavailable_reason("tensor_activity") == REASON_AMD_NO_ACTIVITY
