"""MFU, FLOPs spent/required, progress and ETA as Derivations; peak flag validation."""

from __future__ import annotations

import math

import pytest

from tests.compute.peak_lookup import why_no_peak
from trainmeter.compute.flops import ModelShape, flops_per_token
from trainmeter.compute.mfu import (
    budget_tokens,
    flops_required,
    flops_spent,
    mfu,
    parse_peak_args,
    progress,
)
from trainmeter.compute.peaks import peak_flops
from trainmeter.core.provenance import Input


def test_mfu_is_flops_times_rate_over_devices_times_peak() -> None:
    result = mfu(6e9, 50_000.0, 2, 989.5e12)
    assert result.name == "mfu" and result.unit == "fraction"
    assert math.isclose(result.value, 6e9 * 50_000 / (2 * 989.5e12))
    assert result.formula == "F * tokens_per_s / (devices * peak)"
    assert [i.name for i in result.inputs] == ["F", "tokens_per_s", "devices", "peak"]


def test_mfu_with_peak_row_carries_card_and_source() -> None:
    row = peak_flops("NVIDIA H100 80GB HBM3")
    result = mfu(6e9, 50_000.0, 1, row)
    peak = result.inputs[3]
    assert peak.value == 989.5e12 and peak.provenance == "detected"
    assert peak.source.startswith("H100 SXM dense bf16:")
    assert math.isclose(result.value, 6e9 * 50_000 / 989.5e12)


def test_mfu_without_peak_is_withheld_and_names_the_flags() -> None:
    result = mfu(6e9, 50_000.0, 1, None)
    assert result.value is None
    assert "--peak-tflops X --peak-source TEXT" in result.missing
    reason = why_no_peak("Tesla T4", "bf16")
    withheld = mfu(6e9, 50_000.0, 1, peak_flops("Tesla T4", "bf16"), peak_missing=reason)
    assert withheld.value is None and withheld.missing == reason


def test_mfu_reports_other_missing_inputs() -> None:
    assert "FLOPs per token" in mfu(None, 1.0, 1, 1e12).missing
    assert "tokens/s not measured" in mfu(1.0, None, 1, 1e12).missing
    assert "devices" in mfu(1.0, 1.0, 0, 1e12).missing


def test_session_mfu_is_named_and_labelled_by_pace() -> None:
    result = mfu(6e9, 40_000.0, 1, 989.5e12, pace="session")
    assert result.name == "mfu.session"
    assert result.inputs[1].source == "session tokens/s"
    with pytest.raises(ValueError, match="'wall'.*training-only, session"):
        mfu(6e9, 1.0, 1, 1.0, pace="wall")  # type: ignore[arg-type]


def test_mfu_from_flops_derivation_takes_its_weakest_provenance() -> None:
    shape = ModelShape(n_params=1000, n_embedding_params=100, layers=2, d_model=8, seq_len=16, sources={})
    shape = shape.with_value("seq_len", 16, "assumed", "position table size")
    fpt = flops_per_token(shape, convention="titan")
    result = mfu(fpt, 1000.0, 1, 1e12)
    f = result.inputs[0]
    assert f.value == 6 * 900 + 12 * 2 * 8 * 16
    assert f.provenance == "assumed"
    assert f.source.startswith("flops_per_token.titan = 6 * (N - E)")


def test_flops_spent_is_flops_per_token_times_tokens() -> None:
    result = flops_spent(6e9, 1_000_000)
    assert result.value == 6e15 and result.unit == "FLOP"
    assert flops_spent(None, 10).value is None


def test_flops_required_from_tokens_steps_or_flops() -> None:
    by_tokens = flops_required(6e9, tokens=20e9)
    assert by_tokens.value == 6e9 * 20e9
    by_steps = flops_required(
        6e9, steps=1000, tokens_per_step=Input(name="x", value=524_288, unit="tokens/step", provenance="counted")
    )
    assert by_steps.value == 6e9 * 1000 * 524_288
    assert by_steps.inputs[1].source == "budget_tokens = budget_steps * tokens_per_step"
    by_flops = flops_required(6e9, flops=1e21)
    assert by_flops.value == 1e21 and by_flops.inputs[0].provenance == "declared"
    waiting = flops_required(6e9, steps=1000)
    assert waiting.value is None and "tokens per step" in waiting.missing


def test_budget_needs_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one budget.*tokens, flops"):
        budget_tokens(6e9, tokens=1e9, flops=1e21)
    with pytest.raises(ValueError, match="none"):
        flops_required(6e9)
    assert budget_tokens(6e9, flops=6e18).value == 1e9


def test_progress_is_a_clamped_fraction() -> None:
    assert progress(5e9, 20e9).value == 0.25
    assert progress(25e9, 20e9).value == 1.0
    missing = progress(5e9, None)
    assert missing.value is None and "--budget-tokens" in missing.missing


def test_parse_peak_args_returns_declared_row() -> None:
    row = parse_peak_args("700", "measured bf16 matmul, 8192^3", dtype="torch.bfloat16")
    assert row is not None
    assert (row.card, row.dtype, row.tflops, row.provenance) == ("declared", "bf16", 700.0, "declared")
    assert parse_peak_args(None, None) is None


@pytest.mark.parametrize(
    ("peak", "source", "pattern"),
    [
        (-1, "x", "got -1"),
        (0, "x", "got 0"),
        ("abc", "x", "got 'abc'"),
        (float("nan"), "x", "got nan"),
        (989.5e12, "x", "FLOP/s given instead"),
        (989.5, None, "needs --peak-source"),
        (989.5, "  ", "needs --peak-source"),
        (None, "datasheet", "without --peak-tflops"),
    ],
)
def test_parse_peak_args_rejects_bad_input_naming_value(peak: object, source: object, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        parse_peak_args(peak, source)


def test_declared_peak_feeds_mfu_as_declared_input() -> None:
    row = parse_peak_args(100, "my measurement")
    result = mfu(1e9, 10_000.0, 1, row)
    assert result.inputs[3].provenance == "declared"
    assert math.isclose(result.value, 1e9 * 10_000 / 100e12)
