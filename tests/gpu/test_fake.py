"""The scripted fake backend: profiles, timelines, GPM averaging, fault injection."""

from __future__ import annotations

import pytest

from tests.fakes.gpu.fake import GEMM, IDLE, PROFILES, FakeNvml, Phase, fake_uuid, open_fake
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import (
    REASON_GPM_FIRST_SAMPLE,
    REASON_GPM_NO_PERMISSION,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    GpuUnavailableError,
)


def _two_samples(fake: FakeNvml, clock: FakeClock, index: int = 0, dt: float = 0.5):
    fake.sample(index)
    clock.advance(dt)
    return fake.sample(index)


def test_profiles_cover_the_issue_devices() -> None:
    assert {"h100_sxm", "h200", "a100", "t4", "h100_mig"} <= set(PROFILES)
    assert PROFILES["h100_sxm"].gpm and PROFILES["h200"].gpm
    assert not PROFILES["a100"].gpm and not PROFILES["t4"].gpm and PROFILES["h100_mig"].mig


def test_device_info_follows_profile_and_states_gpm_reason() -> None:
    fake = FakeNvml(["h100_sxm", "a100", "h100_mig"], clock=FakeClock())
    assert fake.device_info(0).gpm_supported and fake.device_info(0).uuid == fake_uuid(0)
    assert fake.device_info(1).gpm_reason == REASON_GPM_NOT_SUPPORTED
    assert fake.device_info(2).mig_enabled and fake.device_info(2).gpm_reason == REASON_MIG


def test_first_gpm_sample_only_primes_the_pair() -> None:
    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    s = fake.sample(0)
    assert s.sm_activity is None and s.unavailable_reason("sm_activity") == REASON_GPM_FIRST_SAMPLE
    assert s.util_gpu == 1.0


def test_gpm_values_are_averages_over_the_interval_across_phases() -> None:
    clock = FakeClock()
    phases = (Phase(duration_s=1.0, levels=IDLE), Phase(duration_s=10.0, levels=GEMM))
    fake = FakeNvml(["h100_sxm"], clock=clock, timelines={0: phases})
    s = _two_samples(fake, clock, dt=2.0)
    assert s.sm_activity == pytest.approx(GEMM.sm_activity / 2)
    assert s.gpm_window_s == pytest.approx(2.0)
    assert s.util_gpu == GEMM.util_gpu  # instantaneous reading at t=2


def test_gpm_within_100ms_repeats_the_last_values() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock)
    first = _two_samples(fake, clock)
    clock.advance(0.05)
    again = fake.sample(0)
    assert again.sm_activity == first.sm_activity and again.gpm_window_s == first.gpm_window_s


def test_lying_gpu_util_fixture_reads_full_util_and_tiny_sm_activity() -> None:
    clock = FakeClock()
    fake = FakeNvml.lying_gpu_util(clock=clock)
    s = _two_samples(fake, clock)
    assert s.util_gpu == 1.0 and s.sm_activity == pytest.approx(0.05)
    assert s.mem_used_bytes == 0


def test_pre_hopper_and_mig_devices_have_no_gpm_and_mig_has_no_util() -> None:
    clock = FakeClock()
    fake = FakeNvml(["t4", "h100_mig"], clock=clock)
    t4 = _two_samples(fake, clock, 0)
    mig = _two_samples(fake, clock, 1)
    assert t4.tensor_activity is None and t4.unavailable_reason("tensor_activity") == REASON_GPM_NOT_SUPPORTED
    assert mig.util_gpu is None and mig.unavailable_reason("util_gpu") == REASON_MIG
    assert mig.power_w is not None


def test_not_supported_fault_blanks_one_field_with_reason() -> None:
    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    fake.inject(0, "not_supported", field="power_w")
    s = fake.sample(0)
    assert s.power_w is None and "not supported" in (s.unavailable_reason("power_w") or "")
    assert s.temperature_c is not None


def test_no_permission_on_gpm_blanks_all_gpm_fields() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock)
    fake.inject(0, "no_permission", field="gpm")
    s = _two_samples(fake, clock)
    assert s.sm_activity is None and s.unavailable_reason("dram_bw_util") == REASON_GPM_NO_PERMISSION
    assert s.gpm_window_s is None


def test_gpu_lost_mid_run_raises_fatal_from_then_on() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200"], clock=clock)
    fake.inject(0, "gpu_lost", from_s=5.0)
    assert fake.sample(0).util_gpu == 1.0
    clock.advance(5.0)
    for _ in range(2):
        with pytest.raises(GpuUnavailableError) as info:
            fake.sample(0)
        assert info.value.fatal and info.value.reason == REASON_GPU_LOST
    assert fake.sample(1).util_gpu == 1.0


def test_gpu_lost_after_calls_counts_sample_calls() -> None:
    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    fake.inject(0, "gpu_lost", after_calls=2)
    fake.sample(0)
    fake.sample(0)
    with pytest.raises(GpuUnavailableError):
        fake.sample(0)


def test_unopenable_device_has_reason_and_cannot_be_sampled() -> None:
    fake = FakeNvml(["h100_sxm"], clock=FakeClock())
    fake.inject(0, "unopenable")
    assert "no permission" in (fake.device_info(0).reason or "")
    with pytest.raises(GpuUnavailableError):
        fake.sample(0)


def test_slow_fault_calls_injected_sleep_and_time_passes() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock, sleep=clock.advance)
    fake.inject(0, "slow", delay_s=3.0)
    fake.sample(0)
    assert clock() == pytest.approx(3.0)


def test_inject_rejects_unknown_fault_kind() -> None:
    fake = FakeNvml(["t4"], clock=FakeClock())
    with pytest.raises(ValueError, match="unknown fault 'melted'"):
        fake.inject(0, "melted")


def test_open_fake_simulates_library_missing_and_success() -> None:
    assert open_fake(failure="library_missing").reason == REASON_LIBRARY_NOT_FOUND
    fake = FakeNvml(["t4"], clock=FakeClock())
    assert open_fake(fake).backend is fake
    with pytest.raises(ValueError):
        open_fake(failure="melted")


def test_closed_fake_raises_fatal() -> None:
    fake = FakeNvml(["t4"], clock=FakeClock())
    fake.close()
    with pytest.raises(GpuUnavailableError):
        fake.sample(0)


def test_mig_gpu_with_gpm_gives_each_gpu_instance_its_own_interval_averages() -> None:
    from tests.fakes.gpu.fake_mig import mig_uuid

    clock = FakeClock()
    stalled = (Phase(duration_s=1e9, levels=IDLE),)
    fake = FakeNvml(["h100_mig_gpm"], clock=clock, mig_timelines={(0, 2): stalled})
    assert fake.device_info(0).mig_instances == ((1, mig_uuid(0, 1)), (2, mig_uuid(0, 2)))
    first = fake.sample(0)
    assert [m.values for m in first.mig_gpm] == [{}, {}]
    assert dict(first.mig_gpm[0].unavailable)["sm_activity"] == REASON_GPM_FIRST_SAMPLE
    clock.advance(0.5)
    busy, idle = fake.sample(0).mig_gpm
    assert busy.values["tensor_activity"] == pytest.approx(GEMM.tensor_activity) and busy.gpm_window_s == 0.5
    assert idle.values["tensor_activity"] == 0.0 and idle.uuid == mig_uuid(0, 2)
    clock.advance(0.05)
    s = fake.sample(0)
    assert s.mig_gpm[0] == busy  # within 100 ms: the previous interval's values again
    assert s.tensor_activity is None and s.unavailable_reason("tensor_activity") == REASON_MIG


def test_mig_gpm_not_supported_refused_or_without_instances_says_why() -> None:
    import dataclasses

    from trainmeter.gpu.backend import REASON_MIG_GPM_NOT_SUPPORTED, REASON_MIG_NO_INSTANCES

    clock = FakeClock()
    empty = dataclasses.replace(PROFILES["h100_mig_gpm"], mig_instances=())
    fake = FakeNvml(["h100_mig", "h100_mig_gpm", empty, "h100_sxm"], clock=clock)
    fake.inject(1, "no_permission", field="mig_gpm")
    reasons = [_two_samples(fake, clock, i).mig_gpm_reason for i in range(4)]
    assert reasons[0] == REASON_MIG_GPM_NOT_SUPPORTED
    assert "GPM per MIG GPU instance" in reasons[1] and "no permission" in reasons[1]
    assert reasons[2] == REASON_MIG_NO_INSTANCES
    assert reasons[3] is None and fake.sample(3).mig_gpm == ()
    assert all(fake.sample(i).mig_gpm == () for i in range(3))
