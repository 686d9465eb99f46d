"""Formula vs hardware: the formula MFU against the tensor pipes on scripted fake-NVML profiles, one per cause."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.fakes.gpu.fake import FakeNvml, Phase
from tests.fakes.gpu.fake_profiles import CROSSCHECK_CASES
from trainmeter.compute.peaks import peak_flops
from trainmeter.core.clock import FakeClock
from trainmeter.core.provenance import Derivation
from trainmeter.gpu.extension import GpuExtension
from trainmeter.gpu.ladder import (
    CAUSE_CONVENTION,
    CAUSE_OUTSIDE,
    CAUSE_PEAK,
    CAUSE_SAMPLES,
    DISAGREE_FACTOR,
    build_ladder,
    cross_check,
)

H100 = peak_flops("NVIDIA H100 80GB HBM3", "bf16")


def _sample(levels):
    clock = FakeClock(0.0)
    fake = FakeNvml(["h100_sxm"], clock=clock, default_timeline=(Phase(duration_s=1e9, levels=levels),))
    fake.sample(0)  # primes the GPM pair
    clock.advance(1.0)
    return fake.sample(0)


def _check(case_name):
    case = CROSSCHECK_CASES[case_name]
    sample = _sample(case.levels)
    ladder = build_ladder(sample, mfu=case.formula_mfu)
    return cross_check(ladder.ofu, tensor_activity=sample.tensor_activity, peak_flops_per_s=H100.flops_per_s,
                       peak_source=H100.source, formula_mfu=case.formula_mfu, counted_mfu=case.counted_mfu,
                       tokens_are_samples=case.tokens_are_samples)


@pytest.mark.parametrize(
    ("case", "verdict", "cause"),
    [
        ("agree", "agree", None),
        ("attention_or_s_wrong", "formula_low", CAUSE_CONVENTION),
        ("wrong_peak_or_dtype", "formula_low", CAUSE_PEAK),
        ("outside_tensor_cores", "formula_high", CAUSE_OUTSIDE),
        ("counted_in_samples", "formula_low", CAUSE_SAMPLES),
    ],
)
def test_each_scripted_profile_gets_its_verdict_and_named_cause(case, verdict, cause):
    check = _check(case)
    assert check.verdict == verdict
    assert check.cause == cause
    if cause is not None:
        assert cause in check.sentence and "likely" in check.sentence
    else:
        assert "agree within 2x" in check.sentence


def test_observed_tensor_flops_is_ofu_times_the_dense_peak():
    check = _check("agree")
    assert check.ofu == pytest.approx(0.45)
    assert check.observed_flops_per_s.value == pytest.approx(0.45 * H100.flops_per_s)
    assert check.observed_flops_per_s.formula == "ofu x peak"
    assert check.ratio == pytest.approx(0.40 / 0.45)
    assert check.to_dict()["factor"] == DISAGREE_FACTOR


def test_a_formula_above_the_band_with_busy_tensor_pipes_blames_the_peak():
    ofu = Derivation(name="ofu", formula="t", value=0.3, unit="fraction", inputs=())
    check = cross_check(ofu, tensor_activity=0.3, peak_flops_per_s=1e15, formula_mfu=0.9)
    assert check.verdict == "formula_high" and check.cause == CAUSE_PEAK


def test_without_gpm_or_without_a_formula_mfu_nothing_is_judged_and_it_says_what_is_missing():
    no_gpm = Derivation(name="ofu", formula="t", value=None, unit="fraction", inputs=(),
                        missing="tensor activity: GPM needs a Hopper or newer datacenter GPU")
    check = cross_check(no_gpm, tensor_activity=None, peak_flops_per_s=1e15, formula_mfu=0.4)
    assert check.verdict is None and "Hopper" in check.sentence
    assert check.observed_flops_per_s.value is None and "Hopper" in check.observed_flops_per_s.missing
    ofu = Derivation(name="ofu", formula="t", value=0.4, unit="fraction", inputs=())
    check = cross_check(ofu, tensor_activity=0.4, peak_flops_per_s=None, formula_mfu=None)
    assert check.verdict is None and "MFU by formula" in check.sentence
    assert "no dense peak" in check.observed_flops_per_s.missing


def test_the_gpu_wing_shows_the_verdict_on_the_ladder_panel_and_in_the_passport(monkeypatch):
    case = CROSSCHECK_CASES["outside_tensor_cores"]
    sample = _sample(case.levels)
    formula = Derivation(name="mfu", formula="f", value=case.formula_mfu, unit="fraction", inputs=())
    counted = Derivation(name="mfu", formula="f", value=case.counted_mfu, unit="fraction", inputs=())
    view = SimpleNamespace(peak=H100, mfu=lambda conv=None: counted if conv == "counted" else formula,
                           flop_per_s=lambda conv=None: None)
    ext = GpuExtension()
    monkeypatch.setattr(ext, "_compute", lambda: view)
    ext._m = SimpleNamespace(token_unit="tokens")
    ext.sampler = SimpleNamespace(unavailable_reason=None, indices=(0,), latest=lambda: {}, devices={})
    ladders = ext._build({0: sample})
    assert ext.crosschecks[0].cause == CAUSE_OUTSIDE
    ext.ladders = ladders
    note = next(p for p in ext.panels() if p["id"] == "ladder0")["note"]
    assert ladders[0].sentence in note and CAUSE_OUTSIDE in note


def test_an_unjudged_check_stays_out_of_the_ladder_panel_note(monkeypatch):
    from tests.fakes.gpu.fake_profiles import GEMM

    sample = _sample(GEMM)
    view = SimpleNamespace(peak=None, mfu=lambda conv=None: None, flop_per_s=lambda conv=None: None)
    ext = GpuExtension()
    monkeypatch.setattr(ext, "_compute", lambda: view)
    ext._m = SimpleNamespace(token_unit="tokens")
    ext.sampler = SimpleNamespace(unavailable_reason=None, indices=(0,), latest=lambda: {}, devices={})
    ext.ladders = ext._build({0: sample})
    note = next(p for p in ext.panels() if p["id"] == "ladder0")["note"]
    assert note == ext.ladders[0].sentence
    assert "not judged" in ext.crosschecks[0].sentence


def test_a_judged_verdict_is_a_line_of_passport_md():
    from trainmeter.record.passport import render_markdown

    check = _check("outside_tensor_cores").to_dict()
    p = {"name": "r", "status": "completed", "steps": 1, "tokens": 1, "gpu": {"crosscheck": {"0": check}}}
    md = render_markdown(p)
    assert "- GPU 0, formula vs hardware: Formula MFU 30% vs tensor pipes (OFU) 5%" in md
    unjudged = {**check, "verdict": None}
    assert "formula vs hardware" not in render_markdown({**p, "gpu": {"crosscheck": {"0": unjudged}}})
