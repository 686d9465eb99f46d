import math

import pytest

from trainmeter.sizes import (
    MISSING,
    axis_labels,
    format_bytes,
    format_count,
    format_duration,
    format_flops,
    format_percent,
    format_value,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("20B", 20e9), ("2b", 2e9), ("1.5M", 1.5e6), ("100", 100.0), ("3K", 3000.0), ("1T", 1e12), ("2G", 2e9), (500, 500.0)],
)
def test_parse_size_accepts_suffixes_and_plain_numbers(text, value):
    assert parse_size(text, flag="--budget-tokens") == value


def test_parse_size_accepts_scientific_notation_for_flops():
    assert parse_size("1e21", flag="--budget-flops", integer=False) == 1e21


@pytest.mark.parametrize("bad", ["20Q", "abc", "-5", "0", "", "1.5", "nan", True])
def test_parse_size_rejects_bad_values_naming_value_and_flag(bad):
    with pytest.raises(ValueError) as err:
        parse_size(bad, flag="--budget-steps")
    assert "--budget-steps" in str(err.value)
    assert repr(bad) in str(err.value)


def test_format_count_is_compact():
    assert format_count(125_000) == "125k"
    assert format_count(1_234_567) == "1.2M"  # the widget's text (trainmeter.sizes)
    assert format_count(None) == "-"
    assert format_count(12) == "12"


# One formatter per unit: the CASES table is also in js/tests/units.test.ts; both must print the same.
CASES = [
    (950, "count", "950"),
    (12_345, "count", "12.3k"),
    (125_000, "tokens", "125k"),
    (1_234_567, "count", "1.2M"),
    (2e9, "tokens", "2.0B"),
    (999_960, "count", "1.0M"),
    (387_000_000, "bytes", "369 MiB"),
    (21.9 * 2**30, "bytes", "21.9 GiB"),
    (512, "bytes", "512 B"),
    (0.423, "fraction", "42.3%"),
    (0.73, "fraction", "73.0%"),
    (7.28e11, "flop", "728 GFLOP"),
    (3.12e14, "flop/s", "312 TFLOP/s"),
    (7.28e11, "FLOP", "728 GFLOP"),
    (3.12e14, "FLOP/s", "312 TFLOP/s"),
    (7.28e8, "FLOP/token", "728 MFLOP/token"),
    (1, "1", "1"),
    (49_100.0, "tokens/s", "49.1k tok/s"),
    (4.5, "samples/s", "4.5 samples/s"),
    (90.0, "s", "0:01:30"),
    (0.35, "s", "0.35 s"),
    (2.34567, "", "2.346"),
    (1.23e-5, "", "1.23e-5"),
    (None, "bytes", MISSING),
    (math.nan, "", MISSING),
]


@pytest.mark.parametrize(("value", "unit", "text"), CASES)
def test_each_unit_has_one_text(value, unit, text):
    assert format_value(value, unit) == text


def test_si_for_counts_binary_for_bytes_percent_for_shares():
    assert format_count(1150) == "1.1k" and format_bytes(1536) == "1.5 KiB" and format_percent(0.0005) == "0.05%"
    assert format_flops(1.2e15) == "1.2 PFLOP" and format_duration(-3) == "0:00:00"


def test_axis_labels_gain_digits_rather_than_repeat():
    assert axis_labels([49000.0, 49050.0, 49100.0], "tokens/s") == ["49.00k", "49.05k", "49.10k"]
    assert len(set(axis_labels([1.30 * 2**30, 1.32 * 2**30], "bytes"))) == 2
