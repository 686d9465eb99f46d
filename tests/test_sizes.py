import json
import math
from pathlib import Path

import pytest

from trainmeter.sizes import (
    axis_labels,
    format_bytes,
    format_count,
    format_count_pair,
    format_duration,
    format_flops,
    format_gib,
    format_integer,
    format_joules,
    format_number,
    format_percent,
    format_rate,
    format_scientific,
    format_seconds,
    format_value,
    format_watts,
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


FIXTURE = Path(__file__).parent / "fixtures" / "format_cases.json"
CASES = json.loads(FIXTURE.read_text(encoding="utf-8"))  # also read by js/tests/format.test.ts
KINDS = {
    "count": format_count, "integer": format_integer, "number": format_number, "scientific": format_scientific,
    "bytes": format_bytes, "percent": format_percent, "flops": format_flops,
    "flops_per_s": lambda v: format_flops(v, per_second=True), "joules": format_joules, "watts": format_watts,
    "duration_s": format_duration, "seconds": format_seconds,
}


def _value(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v] if isinstance(v, str) else v


def _format(case):
    kind, v = case["kind"], case["value"]
    if kind == "count_pair":
        return " / ".join(format_count_pair(*(_value(x) for x in v)))
    if kind == "rate":
        return format_rate(_value(v), case["label"]) if "label" in case else format_rate(_value(v))
    if kind == "gib":
        return format_gib(_value(v), whole=case.get("whole", False))
    if kind == "value":
        return format_value(_value(v), case["unit"])
    return KINDS[kind](_value(v))


def test_the_cases_cover_every_kind_with_missing_and_non_finite_values():
    kinds = {c["kind"] for c in CASES}
    assert kinds == set(KINDS) | {"count_pair", "rate", "gib", "value"}
    assert len(CASES) >= 60
    assert {k for k in kinds if k != "count_pair"} <= {c["kind"] for c in CASES if c["value"] is None}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['kind']}-{c['value']}-{c.get('unit', c.get('label', ''))}")
def test_each_value_has_one_text(case):
    assert _format(case) == case["text"]


def test_whole_counts_below_ten_thousand_print_exactly_so_a_progress_label_never_reads_the_same_twice():
    assert format_count(1150) == "1,150" and format_count(10_000) == "10.0k"
    assert format_count_pair(1_100, 1_150) == ("1,100", "1,150")
    assert format_count_pair(1_100_000, 1_150_000) == ("1.10M", "1.15M")


def test_si_for_counts_binary_for_bytes_percent_for_shares():
    assert format_bytes(1536) == "1.5 KiB" and format_percent(0.0005) == "0.05%"
    assert format_flops(1.2e15) == "1.2 PFLOP" and format_duration(-3) == "0:00:00"


def test_a_value_that_rounds_up_to_the_next_unit_or_style_moves_there():
    assert format_count(999_960) == "1.0M" and format_rate(999.5) == "1.0k tok/s" and format_rate(99.96) == "100 tok/s"
    assert format_seconds(59.96) == "0:01:00" and format_seconds(9.96) == "10.0 s" and format_number(9999.95) == "10.0k"


def test_axis_labels_gain_digits_rather_than_repeat():
    assert axis_labels([49000.0, 49050.0, 49100.0], "tokens/s") == ["49.00k", "49.05k", "49.10k"]
    assert len(set(axis_labels([1.30 * 2**30, 1.32 * 2**30], "bytes"))) == 2
