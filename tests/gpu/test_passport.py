"""The passport's gpu section."""

from __future__ import annotations

import json

from tests.fakes.gpu.fake import FakeNvml, open_fake, passport_of, sampler_for_run, sampler_step
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import REASON_GPU_LOST, REASON_LIBRARY_NOT_FOUND
from trainmeter.gpu.extension import PEAKS_PLACEHOLDER_NOTE, gpu_passport_from_sampler
from trainmeter.gpu.ladder import build_ladder
from trainmeter.gpu.sampler import GpuSampler


def _run(fake: FakeNvml, clock: FakeClock, n: int = 4, window: bool = True) -> GpuSampler:
    s = sampler_for_run("all", clock=clock, open_backend=lambda clock: open_fake(fake))
    if window:
        s.begin_window(0.0)
    for _ in range(n):
        sampler_step(s, clock())
        clock.advance(0.5)
    return s


def test_section_lists_devices_driver_and_training_window_ladder() -> None:
    clock = FakeClock()
    s = _run(FakeNvml(["h100_sxm", "a100"], clock=clock), clock)
    sec = passport_of(s)
    json.dumps(sec)  # JSON-ready
    assert sec["available"] and sec["driver_version"] == "595.45.04"
    assert [d["name"] for d in sec["devices"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    assert sec["averaged_over"] == "training window"
    assert sec["peaks_used"]["note"] == PEAKS_PLACEHOLDER_NOTE
    h100 = sec["ladder"][0]
    assert h100["rungs"]["sm_activity"]["value"] > 0.9 and h100["sentence"].startswith("No fall-off")
    assert any("GPU 1: SM activity" in m and "Hopper" in m for m in sec["missing"])


def test_section_without_window_uses_whole_run() -> None:
    clock = FakeClock()
    s = _run(FakeNvml(["t4"], clock=clock), clock, window=False)
    assert passport_of(s)["averaged_over"] == "whole run"


def test_section_records_why_there_are_no_gpu_counters() -> None:
    s = sampler_for_run(
        None, clock=FakeClock(), open_backend=lambda clock: open_fake(failure="library_missing")
    )
    sec = passport_of(s)
    assert not sec["available"] and sec["reason"] == REASON_LIBRARY_NOT_FOUND
    assert sec["devices"] == [] and REASON_LIBRARY_NOT_FOUND in sec["missing"]


def test_section_records_a_lost_gpu_and_given_ladders_and_peaks() -> None:
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h200"], clock=clock)
    fake.inject(1, "gpu_lost", from_s=1.0)
    s = _run(fake, clock)
    ladder = build_ladder(s.window_averages()[0], mfu=0.4)
    sec = gpu_passport_from_sampler(s, ladders={0: ladder}, peaks_used={"bf16_dense_flop_per_s": 989.5e12})
    assert sec["devices"][1]["stopped_reason"] == REASON_GPU_LOST
    assert f"GPU 1: {REASON_GPU_LOST}" in sec["missing"]
    assert sec["ladder"][0]["rungs"]["mfu"]["value"] == 0.4
    assert sec["peaks_used"] == {"bf16_dense_flop_per_s": 989.5e12}


def test_a_mig_gpu_lists_gpm_per_gpu_instance_or_why_there_is_none() -> None:
    from trainmeter.gpu.backend import REASON_MIG_GPM_NOT_SUPPORTED

    clock = FakeClock()
    section = passport_of(_run(FakeNvml(["h100_mig_gpm", "h100_mig", "h100_sxm"], clock=clock), clock))
    with_gpm, without, plain = section["devices"]
    assert [r["gpu_instance_id"] for r in with_gpm["mig_gpm"]] == [1, 2] and with_gpm["mig_gpm_reason"] is None
    assert with_gpm["mig_gpm"][0]["tensor_activity"] > 0 and with_gpm["mig_gpm"][0]["gpm_window_s"] == 0.5
    assert without["mig_gpm"] == [] and without["mig_gpm_reason"] == REASON_MIG_GPM_NOT_SUPPORTED
    assert f"GPU 1: {REASON_MIG_GPM_NOT_SUPPORTED}" in section["missing"]
    assert "mig_gpm" not in plain
    json.dumps(section)
