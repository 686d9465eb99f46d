"""Readings DCGM documents as wrong are screened out with a reason, never counted as zeros."""

from __future__ import annotations

from tests.fakes.gpu.fake import FakeNvml, Phase
from tests.fakes.gpu.fake_profiles import FAULTED_COUNTERS, LYING_GPU_UTIL
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import GpuSample
from trainmeter.gpu.device_state import ACTIVITY_FIELDS, REASON_COUNTERS_STUCK, counters_stuck, screen


def _two_samples(levels):
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock, default_timeline=(Phase(duration_s=1e9, levels=levels),))
    first = fake.sample(0)
    clock.advance(1.0)
    return first, fake.sample(0)


def test_zero_counters_under_full_gpu_util_become_none_with_the_dcgm_reason():
    first, raw = _two_samples(FAULTED_COUNTERS)
    assert raw.util_gpu == 1.0 and raw.sm_activity == 0.0 and raw.tensor_activity == 0.0
    assert counters_stuck(raw, first)
    s = screen(raw, first)
    for field in ACTIVITY_FIELDS:
        assert getattr(s, field) is None
        assert s.unavailable_reason(field) == REASON_COUNTERS_STUCK
    assert s.util_gpu == 1.0 and s.power_w == raw.power_w  # the rest of the reading stands


def test_a_tiny_kernel_keeping_gpu_util_at_100_is_a_real_reading_and_kept():
    first, raw = _two_samples(LYING_GPU_UTIL)  # SM activity 5%: low, but a reading
    assert not counters_stuck(raw, first) and screen(raw, first) is raw


def test_a_window_that_began_idle_is_a_real_zero_not_a_fault():
    first, raw = _two_samples(FAULTED_COUNTERS)
    idle_start = GpuSample(index=0, t_s=0.0, util_gpu=0.0)  # GPU-Util read idle at the window's start
    assert screen(raw, idle_start) is raw
    assert screen(raw, None) is raw


def test_an_idle_gpu_or_a_sample_without_gpm_is_left_alone():
    idle = GpuSample(index=0, t_s=0.0, util_gpu=0.0, sm_activity=0.0, tensor_activity=0.0)
    assert screen(idle, idle) is idle
    no_gpm = GpuSample(index=0, t_s=0.0, util_gpu=1.0)
    assert screen(no_gpm, no_gpm) is no_gpm
