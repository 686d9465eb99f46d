"""Which backend a run opens: NVML first, amdsmi on a ROCm machine, and the reason when neither answers."""

from __future__ import annotations

from types import SimpleNamespace

from tests.fakes.gpu.amdsmi_fake import FakeAmdSmi
from tests.fakes.gpu.fake import FakeNvml, open_fake
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.amdsmi_backend import open_amdsmi
from trainmeter.gpu.backend import (
    REASON_LIBRARY_NOT_FOUND,
    GpuBackendResult,
    backend_name,
    looks_like_rocm,
    open_gpu_backend,
)


def _no_nvml(clock=None):
    return GpuBackendResult(backend=None, reason=REASON_LIBRARY_NOT_FOUND)


def test_nvml_wins_when_it_opens():
    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    result = open_gpu_backend(open_nvml=lambda clock=None: open_fake(fake), open_amdsmi=None, rocm=True)
    assert result.backend is fake


def test_rocm_machine_without_nvml_opens_amdsmi_and_doctor_names_it():
    result = open_gpu_backend(open_nvml=_no_nvml, rocm=True,
                              open_amdsmi=lambda clock=None: open_amdsmi(clock=clock, module=FakeAmdSmi()))
    assert result.backend is not None and backend_name(result.backend) == "amdsmi (ROCm)"


def test_cpu_machine_keeps_the_nvml_reason_and_never_tries_amdsmi():
    tried = []
    result = open_gpu_backend(open_nvml=_no_nvml, rocm=False, open_amdsmi=lambda clock=None: tried.append(1))
    assert result.backend is None and result.reason == REASON_LIBRARY_NOT_FOUND and not tried


def test_neither_backend_names_both_reasons():
    result = open_gpu_backend(open_nvml=_no_nvml, rocm=True,
                              open_amdsmi=lambda clock=None: open_amdsmi(module=FakeAmdSmi(devices=[])))
    assert result.backend is None and "no AMD GPU" in result.reason and REASON_LIBRARY_NOT_FOUND in result.reason


def test_rocm_is_recognised_from_a_hip_torch_build_without_importing_torch():
    hip_torch = SimpleNamespace(version=SimpleNamespace(hip="6.4.1", cuda=None))
    assert looks_like_rocm({"torch": hip_torch}, kfd_path="/nonexistent")
    assert not looks_like_rocm({}, kfd_path="/nonexistent")
