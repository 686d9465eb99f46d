import pytest

from trainmeter.sizes import format_count, parse_size


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
    assert format_count(1_234_567) == "1.2M"  # the widget's text (trainmeter.units)
    assert format_count(None) == "-"
    assert format_count(12) == "12"
