"""The utilization ladder, OFU, arithmetic intensity and the fall-off sentence."""

from __future__ import annotations

import pytest

from tests.fakes.gpu.fake import FakeNvml, rung, sampler_step
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import REASON_GPM_NOT_SUPPORTED, GpuSample
from trainmeter.gpu.ladder import (
    CAUSE_IDLE,
    CAUSE_LAUNCH_BOUND,
    CAUSE_LOW_MFU,
    CAUSE_MEMORY_BOUND,
    CAUSE_NON_TENSOR,
    CAUSE_UNCOUNTED,
    build_ladder,
    ladder_panel_rows,
    peak_dram_bandwidth,
)
from trainmeter.gpu.sampler import GpuSampler


def _g(**kw) -> GpuSample:
    base = dict(
        util_gpu=1.0,
        sm_activity=0.9,
        tensor_activity=0.6,
        dram_bw_util=0.3,
        sm_clock_mhz=1980.0,
        sm_clock_max_mhz=1980.0,
    )
    base.update(kw)
    return GpuSample(index=0, t_s=0.0, **base)


def test_lying_gpu_util_fixture_sentence_names_sm_activity() -> None:
    clock = FakeClock()
    s = GpuSampler(FakeNvml.lying_gpu_util(clock=clock), (0,), clock=clock)
    for _ in range(3):
        sampler_step(s, clock())
        clock.advance(0.5)
    ladder = build_ladder(s.latest()[0])
    assert ladder.falloff == "sm_activity"
    assert ladder.sentence == "GPU-Util 100% but SM activity 5%: kernels too small or launch-bound."


def test_seed_example_sentence() -> None:
    ladder = build_ladder(_g(sm_activity=0.31))
    assert ladder.sentence == f"GPU-Util 100% but SM activity 31%: {CAUSE_LAUNCH_BOUND}."


def test_rungs_are_in_order_with_sources() -> None:
    ladder = build_ladder(_g(), mfu=0.45, mfu_source="FlopCounterMode / datasheet BF16 peak")
    assert [r.key for r in ladder.rungs] == ["gpu_util", "sm_activity", "tensor_activity", "mfu"]
    assert [r.value for r in ladder.rungs] == [1.0, 0.9, 0.6, 0.45]
    assert "GPM SM_UTIL" in rung(ladder, "sm_activity").source
    assert "ANY_TENSOR_UTIL" in rung(ladder, "tensor_activity").source
    assert rung(ladder, "mfu").source == "FlopCounterMode / datasheet BF16 peak"
    assert ladder.falloff is None
    assert ladder.sentence == "No fall-off: GPU-Util 100%, SM activity 90%, tensor activity 60%, MFU 45%."


def test_low_gpu_util_falls_off_at_the_top_rung() -> None:
    ladder = build_ladder(_g(util_gpu=0.42))
    assert ladder.falloff == "gpu_util" and ladder.sentence == f"GPU-Util 42%: {CAUSE_IDLE}."


def test_low_tensor_with_high_dram_is_memory_bound() -> None:
    ladder = build_ladder(_g(tensor_activity=0.05, dram_bw_util=0.7))
    assert ladder.falloff == "tensor_activity"
    assert (
        ladder.sentence
        == f"SM activity 90% but tensor activity 5% with DRAM bandwidth 70%: {CAUSE_MEMORY_BOUND}."
    )


def test_low_tensor_with_low_dram_is_non_tensor_math() -> None:
    ladder = build_ladder(_g(tensor_activity=0.05, dram_bw_util=0.1))
    assert ladder.sentence == f"SM activity 90% but tensor activity 5%: {CAUSE_NON_TENSOR}."


def test_mfu_far_below_ofu_points_at_uncounted_work() -> None:
    ladder = build_ladder(_g(tensor_activity=0.6), mfu=0.2)
    assert ladder.falloff == "mfu"
    assert ladder.sentence == f"tensor activity 60% but MFU 20% (OFU estimate 60%): {CAUSE_UNCOUNTED}."


def test_low_mfu_without_gpm_compares_with_gpu_util() -> None:
    g = GpuSample(
        index=0,
        t_s=0.0,
        util_gpu=0.97,
        unavailable=(
            ("sm_activity", REASON_GPM_NOT_SUPPORTED),
            ("tensor_activity", REASON_GPM_NOT_SUPPORTED),
        ),
    )
    ladder = build_ladder(g, mfu=0.1)
    assert rung(ladder, "sm_activity").missing == REASON_GPM_NOT_SUPPORTED
    assert ladder.falloff == "mfu" and ladder.sentence == f"GPU-Util 97% but MFU 10%: {CAUSE_LOW_MFU}."


def test_no_fall_off_lists_rungs_that_are_not_available() -> None:
    g = GpuSample(index=0, t_s=0.0, util_gpu=0.97)
    ladder = build_ladder(g)
    assert ladder.sentence == "No fall-off: GPU-Util 97% (SM activity, tensor activity, MFU not available)."
    assert rung(ladder, "mfu").missing


def test_no_readings_at_all_says_why() -> None:
    g = GpuSample(index=0, t_s=0.0, unavailable=(("util_gpu", "MIG mode is on"),))
    assert build_ladder(g).sentence == "No utilization readings: MIG mode is on."


def test_ofu_is_tensor_activity_scaled_by_clock_and_labelled_estimate() -> None:
    ladder = build_ladder(_g(tensor_activity=0.5, sm_clock_mhz=1485.0, sm_clock_max_mhz=1980.0))
    assert ladder.ofu.value == pytest.approx(0.5 * 0.75)
    assert "estimate" in ladder.ofu.formula and "2605.20799" in ladder.ofu.formula
    assert {i.name for i in ladder.ofu.inputs} == {"tensor_activity", "sm_clock_mhz", "sm_clock_max_mhz"}


def test_ofu_clock_ratio_is_capped_at_one_and_missing_without_tensor() -> None:
    assert (
        build_ladder(_g(tensor_activity=0.5, sm_clock_mhz=2000.0, sm_clock_max_mhz=1980.0)).ofu.value == 0.5
    )
    missing = build_ladder(
        GpuSample(index=0, t_s=0.0, util_gpu=1.0, unavailable=(("tensor_activity", "no GPM"),))
    ).ofu
    assert missing.value is None and "no GPM" in (missing.missing or "")


def test_arithmetic_intensity_from_flops_and_dram_bandwidth() -> None:
    peak = peak_dram_bandwidth("NVIDIA H100 80GB HBM3")
    assert peak is not None
    ladder = build_ladder(
        _g(dram_bw_util=0.4), flop_per_s=400e12, peak_dram_bytes_per_s=peak[0], peak_dram_source=peak[1]
    )
    assert ladder.arithmetic_intensity.value == pytest.approx(400e12 / (0.4 * 3350e9))
    assert ladder.arithmetic_intensity.unit == "FLOP/byte"


def test_arithmetic_intensity_missing_reasons() -> None:
    assert "FLOP" in (build_ladder(_g()).arithmetic_intensity.missing or "")
    assert "peak DRAM" in (build_ladder(_g(), flop_per_s=1e12).arithmetic_intensity.missing or "")
    assert "no DRAM traffic" in (
        build_ladder(
            _g(dram_bw_util=0.0), flop_per_s=1e12, peak_dram_bytes_per_s=1e12
        ).arithmetic_intensity.missing
        or ""
    )


@pytest.mark.parametrize(
    ("name", "gb_per_s"),
    [
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H100 NVL", 3900),
        ("NVIDIA H200", 4800),
        ("NVIDIA GH200 144G HBM3e", 4900),
        ("NVIDIA GH200 480GB", 4000),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA A100 80GB PCIe", 1935),
        ("Tesla T4", 320),
        ("NVIDIA L4", 300),
        ("NVIDIA L40S", 864),
        ("NVIDIA B200", 7700),
        ("NVIDIA GB200", 8000),
        ("GeForce RTX 3090", 936),
    ],
)
def test_peak_dram_bandwidth_matches_most_specific_name(name: str, gb_per_s: float) -> None:
    peak = peak_dram_bandwidth(name)
    assert peak is not None and peak[0] == gb_per_s * 1e9


def test_peak_dram_bandwidth_unknown_model_is_none() -> None:
    assert peak_dram_bandwidth("NVIDIA L40") is None and peak_dram_bandwidth("NVIDIA H100") is None


def test_ladder_accepts_sampler_averages() -> None:
    clock = FakeClock()
    s = GpuSampler(FakeNvml(["h100_sxm"], clock=clock), (0,), clock=clock)
    for _ in range(3):
        sampler_step(s, clock())
        clock.advance(0.5)
    ladder = build_ladder(s.averages()[0], mfu=0.4)
    assert rung(ladder, "sm_activity").value == pytest.approx(0.93)
    assert ladder.falloff is None


def test_panel_rows_follow_the_widget_protocol() -> None:
    rows = ladder_panel_rows(build_ladder(_g(), mfu=None))
    assert [r["label"] for r in rows][:4] == ["GPU-Util", "SM activity", "tensor activity", "MFU"]
    assert all({"label", "value", "unit"} <= set(r) for r in rows)
    mfu = rows[3]
    assert mfu["value"] is None and mfu["note"]
