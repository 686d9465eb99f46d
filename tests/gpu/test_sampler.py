"""The background sampler: schedule, averages, window, errors, threads, stop."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.gpu.fake import (
    GEMM,
    IDLE,
    FakeNvml,
    Phase,
    open_fake,
    passport_of,
    rung,
    sampler_for_run,
    sampler_history,
    sampler_step,
)
from trainmeter.core.clock import FakeClock, MonotonicClock
from trainmeter.gpu.backend import REASON_GPU_LOST, REASON_LIBRARY_NOT_FOUND, GpuSample
from trainmeter.gpu.sampler import GpuSampler, _next_due


def _sampler(fake: FakeNvml, clock, indices=(0,), **kw) -> GpuSampler:
    return GpuSampler(fake, indices, clock=clock, **kw)


def _poll(predicate, timeout_s: float = 3.0) -> bool:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_step_samples_each_device_once_per_interval() -> None:
    clock = FakeClock()
    s = _sampler(FakeNvml(["h100_sxm", "a100"], clock=clock), clock, (0, 1), interval_s=0.5)
    assert sampler_step(s, 0.0) == 2
    clock.advance(0.3)
    assert sampler_step(s, clock()) == 0
    clock.advance(0.2)
    assert sampler_step(s, clock()) == 2
    assert s.status()[0].n_samples == 2 and s.latest()[1].t_s == 0.5


def test_interval_below_100ms_is_rejected() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        GpuSampler(None, (), clock=FakeClock(), interval_s=0.05)


def test_history_is_bounded() -> None:
    clock = FakeClock()
    s = _sampler(FakeNvml(["t4"], clock=clock), clock, history_len=3)
    for _ in range(10):
        sampler_step(s, clock())
        clock.advance(0.5)
    hist = sampler_history(s, 0)
    assert len(hist) == 3 and hist[-1].t_s == 4.5
    assert sampler_history(s, 7) == ()


def test_averages_are_means_over_samples_with_values() -> None:
    clock = FakeClock()
    phases = (Phase(duration_s=1.0, levels=IDLE), Phase(duration_s=100.0, levels=GEMM))
    s = _sampler(FakeNvml(["h100_sxm"], clock=clock, timelines={0: phases}), clock)
    for _ in range(4):  # t = 0, 0.5 idle; 1.0, 1.5 gemm
        sampler_step(s, clock())
        clock.advance(0.5)
    avg = s.averages()[0]
    assert avg.n_samples == 4
    assert avg.util_gpu == pytest.approx(0.5)
    assert avg.power_w == pytest.approx((60 + 60 + 650 + 650) / 4)
    # GPM: first sample primes; windows (0,0.5] idle, (0.5,1.0] idle, (1.0,1.5] gemm
    assert avg.sm_activity == pytest.approx(GEMM.sm_activity / 3)
    assert avg.mem_used_peak_bytes == GEMM.mem_used_bytes
    assert avg.start_s == 0.0 and avg.end_s == 1.5


def test_averages_keep_reason_for_fields_never_seen() -> None:
    clock = FakeClock()
    s = _sampler(FakeNvml(["a100"], clock=clock), clock)
    sampler_step(s, 0.0)
    avg = s.averages()[0]
    assert avg.tensor_activity is None and "Hopper" in (avg.unavailable_reason("tensor_activity") or "")


def test_window_counts_only_samples_between_begin_and_end() -> None:
    clock = FakeClock()
    s = _sampler(
        FakeNvml(
            ["h100_sxm"],
            clock=clock,
            timelines={
                0: (
                    Phase(duration_s=1.0, levels=IDLE),
                    Phase(duration_s=1.0, levels=GEMM),
                    Phase(duration_s=9.0, levels=IDLE),
                )
            },
        ),
        clock,
    )
    sampler_step(s, 0.0)
    s.begin_window(1.0)
    for t in (0.5, 1.0, 1.5, 2.0, 2.5):
        clock.now_s = t
        sampler_step(s, t)
    s.end_window(1.5)  # the last step was at 1.5: samples at 2.0 and 2.5 come back out
    clock.now_s = 3.0
    sampler_step(s, 3.0)
    win = s.window_averages()[0]
    assert win.n_samples == 2 and win.util_gpu == pytest.approx(1.0)
    assert win.start_s == 1.0 and win.end_s == 1.5
    s.end_window(1.5)  # idempotent
    assert s.window_averages()[0].n_samples == 2
    assert s.averages()[0].n_samples == 7


def test_unexpected_backend_error_is_recorded_and_sampling_continues() -> None:
    clock = FakeClock()

    class Flaky(FakeNvml):
        calls = 0

        def sample(self, index: int) -> GpuSample:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("driver hiccup")
            return super().sample(index)

    s = _sampler(Flaky(["t4"], clock=clock), clock)
    sampler_step(s, 0.0)
    st = s.status()[0]
    assert st.active and st.n_errors == 1 and "driver hiccup" in (st.last_error or "")
    clock.advance(0.5)
    sampler_step(s, clock())
    assert s.status()[0].n_samples == 1


def test_device_stops_after_max_consecutive_errors() -> None:
    clock = FakeClock()

    class Broken(FakeNvml):
        def sample(self, index: int) -> GpuSample:
            raise OSError("x" * 1000)

    s = _sampler(Broken(["t4"], clock=clock), clock, max_consecutive_errors=3)
    for _ in range(5):
        sampler_step(s, clock())
        clock.advance(0.5)
    st = s.status()[0]
    assert not st.active and st.n_errors == 3 and "3 failures in a row" in (st.stopped_reason or "")
    assert len(st.last_error or "") <= 300


def test_lost_gpu_stops_only_that_device() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200"], clock=clock)
    fake.inject(0, "gpu_lost", from_s=1.0)
    s = _sampler(fake, clock, (0, 1))
    for _ in range(5):
        sampler_step(s, clock())
        clock.advance(0.5)
    st = s.status()
    assert not st[0].active and st[0].stopped_reason == REASON_GPU_LOST and st[0].n_samples == 2
    assert st[1].active and st[1].n_samples == 5


def test_slow_call_skips_missed_ticks_instead_of_bursting() -> None:
    assert _next_due(0.5, 1.2, 0.5) == pytest.approx(1.5)
    assert _next_due(0.5, 0.4, 0.5) == pytest.approx(1.0)
    assert _next_due(1.5, 1.7, 0.5) == pytest.approx(2.0)
    assert _next_due(1.0, 1.2, 0.5) == pytest.approx(1.5)  # the grid point still ahead (a slow sample's skip)
    assert _next_due(None, 3.0, 0.5) == pytest.approx(3.5)


def test_for_run_without_nvml_gives_empty_sampler_with_reason() -> None:
    clock = FakeClock()
    s = sampler_for_run(None, clock=clock, open_backend=lambda clock: open_fake(failure="library_missing"))
    assert s.unavailable_reason == REASON_LIBRARY_NOT_FOUND
    assert sampler_step(s, 0.0) == 0 and s.latest() == {} and s.indices == ()
    s.start()
    s.stop()


def test_for_run_selects_declared_devices_and_rejects_bad_spec() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200", "a100"], clock=clock)
    s = sampler_for_run("0,2", clock=clock, open_backend=lambda clock: open_fake(fake), cuda_uuids=None)
    assert s.indices == (0, 2) and s.selection.provenance == "declared"
    assert s.devices[2].name == "NVIDIA A100-SXM4-40GB" and s.driver_version == "595.45.04"
    with pytest.raises(ValueError, match="there is no GPU 5"):
        sampler_for_run("5", clock=clock, open_backend=lambda clock: open_fake(fake), cuda_uuids=None)
    with pytest.raises(ValueError, match="valid"):
        sampler_for_run("zero", clock=clock, open_backend=lambda clock: open_fake(fake))


def test_for_run_default_uses_cuda_uuids() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200"], clock=clock)
    s = sampler_for_run(
        None,
        clock=clock,
        open_backend=lambda clock: open_fake(fake),
        cuda_uuids=[fake.device_info(1).uuid],
        env={},
    )
    assert s.indices == (1,) and s.selection.provenance == "detected"


def test_stop_closes_an_owned_backend() -> None:
    clock = FakeClock()
    fake = FakeNvml(["t4"], clock=clock)
    s = sampler_for_run("all", clock=clock, open_backend=lambda clock: open_fake(fake))
    s.stop()
    assert fake.closed


def test_threads_sample_in_background_and_stop_is_immediate() -> None:
    clock = MonotonicClock()
    s = _sampler(FakeNvml(["h100_sxm", "t4"], clock=clock), clock, (0, 1), interval_s=1.0)
    s.start()
    assert _poll(lambda: all(st.n_samples >= 1 for st in s.status().values()))
    t0 = time.perf_counter()
    s.stop()
    assert time.perf_counter() - t0 < 0.5  # not a sampling period (1 s) waited out, even on a busy machine
    assert not any(t.is_alive() for t in s._threads)


def test_slow_call_on_one_device_does_not_delay_the_others() -> None:
    clock = MonotonicClock()
    release = threading.Event()
    fake = FakeNvml(["h100_sxm", "h200"], clock=clock, sleep=lambda delay_s: release.wait(delay_s))
    fake.inject(0, "slow", delay_s=5.0)
    s = _sampler(fake, clock, (0, 1), interval_s=0.1)
    s.start()
    try:
        assert _poll(lambda: s.status()[1].n_samples >= 3)
        assert s.status()[0].n_samples == 0  # still inside its slow call
    finally:
        release.set()
        s.stop()
    assert _poll(lambda: s.status()[0].n_samples >= 1)


def test_in_background_opens_samples_and_closes_on_its_own_threads() -> None:
    clock = MonotonicClock()
    fake = FakeNvml(["h100_sxm", "h100_sxm"], clock=clock)
    threads: dict[str, threading.Thread] = {}

    def open_backend(clock):
        threads["open"] = threading.current_thread()
        return open_fake(fake)

    real_close = fake.close

    def close():
        threads["close"] = threading.current_thread()
        real_close()

    fake.close = close
    s = GpuSampler.in_background("all", clock=clock, open_backend=open_backend, cuda_uuids=None, interval_s=0.1)
    assert s.indices == () and s.unavailable_reason is not None  # nothing opened on the caller's thread
    s.start()
    assert _poll(lambda: len(s.latest()) == 2)
    assert s.unavailable_reason is None and s.selection is not None
    s.stop()
    assert threads["open"] is not threading.current_thread() and threads["close"] is not threading.current_thread()
    assert fake.closed and s.abandoned_reason is None


def test_in_background_turns_a_gpus_value_naming_no_device_into_a_reason() -> None:
    clock = MonotonicClock()
    s = GpuSampler.in_background("5", clock=clock, open_backend=lambda clock: open_fake(FakeNvml(["h100_sxm"], clock=clock)),
                                 cuda_uuids=None)
    s.start()
    assert _poll(lambda: s.unavailable_reason is not None and "GPU sampling off" in s.unavailable_reason)
    s.stop()
    assert s.indices == ()


# --- what DCGM documents: each a scripted fake and a stated reading, never a silent zero -------------------


def test_counters_stuck_at_zero_after_a_fault_are_not_averaged_and_say_why() -> None:
    from tests.fakes.gpu.fake_profiles import FAULTED_COUNTERS
    from trainmeter.gpu.device_state import REASON_COUNTERS_STUCK

    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock, default_timeline=(
        Phase(duration_s=2.0, levels=GEMM), Phase(duration_s=1e9, levels=FAULTED_COUNTERS)))
    s = _sampler(fake, clock)
    for _ in range(10):
        sampler_step(s, clock())
        clock.advance(0.5)
    assert s.latest()[0].tensor_activity is None
    assert s.latest()[0].unavailable_reason("tensor_activity") == REASON_COUNTERS_STUCK
    avg = s.averages()[0]
    assert avg.tensor_activity is not None and avg.tensor_activity > 0.5  # the GEMM samples only, no zeros


def test_gpm_permission_lost_mid_run_is_said_and_earlier_values_stand() -> None:
    from trainmeter.gpu.backend import REASON_GPM_NO_PERMISSION

    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock)
    fake.inject(0, "no_permission", field="gpm", from_s=2.0)
    s = _sampler(fake, clock)
    for _ in range(8):
        sampler_step(s, clock())
        clock.advance(0.5)
    latest = s.latest()[0]
    assert latest.sm_activity is None and latest.unavailable_reason("sm_activity") == REASON_GPM_NO_PERMISSION
    assert latest.util_gpu == GEMM.util_gpu  # NVML's non-GPM readings go on
    assert s.averages()[0].sm_activity == pytest.approx(GEMM.sm_activity)  # no zeros averaged in
    assert s.status()[0].active


def test_a_gpu_off_the_bus_is_stated_in_the_passport_not_read_as_zero() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm"], clock=clock)
    fake.inject(0, "gpu_lost", from_s=1.5)
    s = _sampler(fake, clock)
    for _ in range(6):
        sampler_step(s, clock())
        clock.advance(0.5)
    section = passport_of(s)
    text = str(section)
    assert REASON_GPU_LOST in text


def test_mig_instances_say_gpu_util_and_gpm_are_unavailable() -> None:
    from trainmeter.gpu.backend import REASON_MIG
    from trainmeter.gpu.ladder import build_ladder

    clock = FakeClock()
    fake = FakeNvml(["h100_mig"], clock=clock)
    s = _sampler(fake, clock)
    for _ in range(4):
        sampler_step(s, clock())
        clock.advance(0.5)
    latest = s.latest()[0]
    assert latest.util_gpu is None and latest.unavailable_reason("util_gpu") == REASON_MIG
    assert latest.tensor_activity is None and latest.unavailable_reason("tensor_activity") == REASON_MIG
    ladder = build_ladder(latest)
    assert "MIG" in ladder.sentence and rung(ladder, "tensor_activity").missing == REASON_MIG


@pytest.mark.parametrize("by", ["index", "uuid"])
def test_cuda_visible_devices_by_index_or_uuid_picks_the_right_nvml_device(by) -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200", "a100"], clock=clock)
    value = "2" if by == "index" else fake.device_info(2).uuid
    s = sampler_for_run(None, clock=clock, open_backend=lambda clock: open_fake(fake), cuda_uuids=None,
                           env={"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert s.indices == (2,) and s.devices[2].name == "NVIDIA A100-SXM4-40GB"
    assert s.selection.provenance == "detected"


def test_gpm_per_mig_instance_is_read_on_the_samplers_thread_not_the_callers() -> None:
    """A slow NVML on the sampler's thread: the caller's reads return at once; the per-instance GPM arrives."""
    clock = FakeClock()
    fake = FakeNvml(["h100_mig_gpm"], clock=clock)
    fake.inject(0, "slow", delay_s=0.2)
    s = _sampler(fake, clock, interval_s=0.1)
    s.start()
    try:
        t0 = time.perf_counter()
        s.latest(), s.averages(), s.status()
        assert time.perf_counter() - t0 < 0.1

        def read() -> bool:
            clock.advance(0.25)  # the sampler's clock moves on: its next tick falls due
            return any(m.values for m in s.latest().get(0, GpuSample(index=0, t_s=0.0)).mig_gpm)

        assert _poll(read)
        latest = s.latest()[0]
        assert [m.gpu_instance_id for m in latest.mig_gpm] == [1, 2] and latest.mig_gpm_reason is None
    finally:
        s.stop()
