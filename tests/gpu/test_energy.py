"""GPU energy: NVML's energy counter through the real bindings, the fake's scripted counter, the two sources."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from tests.fakes.gpu.fake import ENERGY_AT_START_MJ, GEMM, IDLE, FakeNvml, Phase
from tests.gpu.test_nvml import FakeLib, _device, _index, _open
from trainmeter.core.clock import FakeClock
from trainmeter.energy.summary import SOURCE_COUNTER, SOURCE_POWER, from_counter, from_power
from trainmeter.gpu.sampler import read_counters


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    """tests/gpu/test_nvml.py's fake libnvidia-ml behind the real pynvml bindings."""
    fake = FakeLib(FakeClock(100.0), [_device("NVIDIA H100 80GB HBM3", gpm=True),
                                      _device("NVIDIA A100-SXM4-40GB", gpm=False)])
    monkeypatch.setattr(pynvml, "nvmlLib", fake.ns)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return fake


def _energy_symbol(lib: FakeLib, mj_by_device: dict[int, int]) -> None:
    def total_energy(h: Any, ref: Any) -> int:
        ref._obj.value = mj_by_device[_index(h)]
        return 0

    lib.ns.nvmlDeviceGetTotalEnergyConsumption = total_energy
    pynvml._nvmlGetFunctionPointer_cache.pop("nvmlDeviceGetTotalEnergyConsumption", None)


def test_nvml_backend_reads_the_energy_counter_in_millijoules(lib: FakeLib) -> None:
    _energy_symbol(lib, {0: 123_456_789, 1: 42})
    backend = _open(lib)
    assert backend.total_energy_mj(0) == (123_456_789.0, None)
    assert read_counters(backend, (0, 1)) == {0: (123_456_789.0, None), 1: (42.0, None)}


def test_nvml_backend_without_the_symbol_says_the_driver_is_too_old(lib: FakeLib) -> None:
    backend = _open(lib)
    value, reason = backend.total_energy_mj(0)
    assert value is None and reason == "total energy counter: the NVIDIA driver is too old (function not found)"


def test_nvml_backend_unsupported_counter_is_a_reason_and_not_retried(lib: FakeLib) -> None:
    calls = []

    def unsupported(h: Any, ref: Any) -> int:
        calls.append(h)
        return pynvml.NVML_ERROR_NOT_SUPPORTED

    lib.ns.nvmlDeviceGetTotalEnergyConsumption = unsupported
    backend = _open(lib)
    assert backend.total_energy_mj(1) == (None, "total energy counter: not supported on this device")
    assert backend.total_energy_mj(1)[0] is None and len(calls) == 1
    backend.close()
    assert backend.total_energy_mj(0)[0] is None


def test_fake_counter_integrates_the_scripted_power_timeline() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock,
                    timelines={0: (Phase(duration_s=2.0, levels=IDLE), Phase(duration_s=1e9, levels=GEMM))})
    assert fake.total_energy_mj(0) == (ENERGY_AT_START_MJ, None)
    clock.advance(5.0)
    assert fake.total_energy_mj(0) == (pytest.approx(ENERGY_AT_START_MJ + 1000 * (2 * 60.0 + 3 * 650.0)), None)
    fake.inject(0, "not_supported", field="total_energy_mj")
    assert fake.total_energy_mj(0) == (None, "total energy counter: not supported on this device")


def test_counter_difference_and_power_integration_name_their_source() -> None:
    counted = from_counter(0, "H100", 1_000_000.0, 3_000_000.0, 10.0)
    assert (counted.joules, counted.avg_watts, counted.source) == (2000.0, 200.0, SOURCE_COUNTER)
    assert counted.to_dict()["kwh"] == pytest.approx(2000 / 3.6e6)
    backwards = from_counter(0, "H100", 5.0, 1.0, 10.0)
    assert backwards.joules is None and "went backwards" in backwards.missing
    integrated = from_power(0, "T4", 70.0, 20, 10.0, "counter: not supported")
    assert (integrated.joules, integrated.source, integrated.missing) == (700.0, SOURCE_POWER, "counter: not supported")
    one = from_power(0, "T4", 70.0, 1, 10.0, None)
    assert one.joules is None and "needs 2" in one.missing


def test_read_counters_on_a_backend_without_the_method_says_so() -> None:
    assert read_counters(object(), (0,)) == {0: (None, "this GPU backend has no energy counter")}
