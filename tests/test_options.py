import re
from pathlib import Path

import pytest

from trainmeter.options import make_options


def test_defaults_are_a_named_run_under_dot_trainmeter():
    o = make_options()
    assert o.name == "run" and o.run_root == Path(".trainmeter/runs") and o.interval_s == 10.0
    assert o.budget_tokens is None and o.widget is True


def test_budget_tokens_parses_suffix():
    assert make_options(budget_tokens="2B").budget_tokens == 2_000_000_000


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"interval_s": -1}, "--interval"),
        ({"interval_s": "x"}, "--interval"),
        ({"budget_tokens": "20Q"}, "'20Q'"),
        ({"budget_flops": "abc"}, "--budget-flops"),
        ({"name": "bad name/../"}, "run name"),
        ({"budget_tokens": "1B", "budget_steps": 10}, "at most one budget"),
        ({"peak_tflops": -1, "peak_source": "x"}, "--peak-tflops"),
        ({"peak_tflops": 100}, "--peak-source"),
        ({"layers": "zero"}, "--layers"),
    ],
)
def test_bad_values_raise_naming_the_value_and_what_is_valid(kwargs, needle):
    with pytest.raises(ValueError) as err:
        make_options(**kwargs)
    assert needle in str(err.value)


def test_declared_peak_is_kept_with_its_source():
    o = make_options(peak_tflops="989", peak_source="H100 SXM datasheet")
    assert o.peak_tflops == 989.0 and o.peak_source == "H100 SXM datasheet"


def test_options_to_dict_is_json_ready():
    import json

    assert json.loads(json.dumps(make_options(run_dir="/tmp/x").to_dict()))["run_root"] == "/tmp/x"


def test_grid_intensity_is_recorded_as_declared_with_its_source() -> None:
    o = make_options(grid_gco2_per_kwh="350", grid_source=" utility 2024 report ")
    assert o.grid_gco2_per_kwh == 350.0 and o.grid_source == "utility 2024 report"
    assert make_options().grid_gco2_per_kwh is None


@pytest.mark.parametrize(
    ("value", "source", "needle"),
    [
        ("abc", "x", "invalid value 'abc' for --grid-gco2-per-kwh"),
        ("-1", "x", "between 0 and 2000"),
        ("400000", "x", "between 0 and 2000"),
        ("350", None, "needs --grid-source"),
        ("350", "  ", "needs --grid-source"),
        (None, "x", "--grid-source was given without --grid-gco2-per-kwh"),
    ],
)
def test_bad_grid_flags_name_the_value_and_what_is_valid(value, source, needle) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        make_options(grid_gco2_per_kwh=value, grid_source=source)
def test_max_series_defaults_to_256_and_takes_a_bounded_whole_number():
    import pytest

    from trainmeter.options import make_options

    assert make_options().max_series == 256
    assert make_options(max_series="1000").max_series == 1000
    for bad in (0, -1, "many", 10**9, True):
        with pytest.raises(ValueError, match="--max-series"):
            make_options(max_series=bad)


def test_every_option_has_exactly_one_flag_and_every_flag_feeds_make_options():
    import inspect
    from dataclasses import fields

    from trainmeter.options import FLAGS, MonitorOptions

    assert sorted(f.field for f in FLAGS) == sorted(f.name for f in fields(MonitorOptions))
    params = set(inspect.signature(make_options).parameters)
    assert {f.dest for f in FLAGS if f.metavar} <= params
    assert {f.field for f in FLAGS if not f.metavar} <= params  # switches: --no-widget sets widget=False


def test_flags_help_names_every_flag_with_its_default_and_is_never_truncated():
    from trainmeter.options import FLAGS, flags_help

    text = flags_help()
    for f in FLAGS:
        line = next(line for line in text.splitlines() if line.strip().startswith(f.flag + " ")
                    or line.strip() == f.flag or line.strip().startswith(f.flag + "  "))
        assert f.help in line and f"[default: {f.default}]" in line
    assert "..." not in text


def test_a_peak_over_the_one_limit_is_refused_at_the_flag_naming_the_value_and_the_limit():
    from trainmeter.compute.peaks import MAX_PEAK_TFLOPS

    with pytest.raises(ValueError) as err:
        make_options(peak_tflops=MAX_PEAK_TFLOPS * 2, peak_source="datasheet")
    text = str(err.value)
    assert "--peak-tflops" in text and repr(MAX_PEAK_TFLOPS * 2) in text and f"at most {MAX_PEAK_TFLOPS:g}" in text


def test_every_peak_the_flag_accepts_the_compute_wing_accepts():
    from trainmeter.compute.mfu import parse_peak_args

    o = make_options(peak_tflops="5e5", peak_source="datasheet")
    row = parse_peak_args(o.peak_tflops, o.peak_source)
    assert row is not None and row.tflops == 5e5


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"interval_s": True}, "invalid value True for --interval"),
        ({"interval_s": "inf"}, "--interval"),
        ({"interval_s": " 5"}, "--interval"),
        ({"layers": 2**70}, "expected a whole number of layers, from 1 to 100,000"),
        ({"layers": True}, "invalid value True for --layers"),
        ({"d_model": 1.5}, "--d-model"),
        ({"seq_len": "٣"}, "--seq-len"),  # a Unicode digit is not an ASCII one
        ({"vocab": "+5"}, "invalid value '+5' for --vocab"),
        ({"vocab": "5_000"}, "--vocab"),
        ({"memory_snapshot_step": 10**13}, "--memory-snapshot-step"),
        ({"max_series": False}, "--max-series"),
        ({"gpus": "0,0"}, "0 named twice"),
        ({"gpus": "0,GPU-8f1c2d3e-1111-2222-3333-444455556666,GPU-8F1C2D3E-1111-2222-3333-444455556666"},
         "named twice"),
        ({"gpus": " all"}, "remove the spaces around it"),
        ({"gpus": "99999999999999999999"}, "is past 4095"),
        ({"gpus": True}, "--gpus"),
        ({"gpus": 1.5}, "--gpus"),
        ({"budget_steps": 10**30}, "expected optimizer steps, from 1 to 1e12"),
        ({"budget_tokens": "99999999999999999999999T"}, "expected tokens, from 1 to 1e18"),
        ({"budget_tokens": " 2B"}, "remove the spaces"),
        ({"budget_flops": "1e40"}, "expected FLOPs, from 1 to 1e32"),
        ({"budget_steps": True}, "--budget-steps"),
        ({"name": "a.."}, "cannot end with '.'"),
        ({"name": "CON"}, "CON is a device name on Windows"),
        ({"name": "lpt1.run"}, "LPT1 is a device name on Windows"),
        ({"name": 5}, "invalid run name 5"),
        ({"grid_gco2_per_kwh": True, "grid_source": "x"}, "--grid-gco2-per-kwh"),
        ({"convention": 5}, "invalid value 5 for --convention: expected text"),
        ({"peak_tflops": 100, "peak_source": 7}, "--peak-source"),
    ],
)
def test_odd_values_are_refused_naming_the_value_and_the_valid_range(kwargs, needle):
    with pytest.raises(ValueError) as err:
        make_options(**kwargs)
    assert needle in str(err.value)


def test_values_inside_the_ranges_are_kept_in_their_canonical_form():
    o = make_options(layers="12", d_model=768.0, vocab=50257, gpus="1, 0", budget_steps="1.5k", interval_s="0.5",
                     name="CONV-run.v2", max_series=100_000)
    assert (o.layers, o.d_model, o.vocab, o.gpus, o.budget_steps, o.interval_s) == (12, 768, 50257, "1,0", 1500, 0.5)
    assert make_options(gpus="ALL").gpus == "all" and make_options(gpus=3).gpus == "3"


def test_an_unknown_keyword_to_monitor_is_a_value_error_naming_the_valid_ones(tmp_path):
    import trainmeter as tm

    with pytest.raises(ValueError, match=r"unknown keyword 'budget' for tm.monitor: valid keywords are name, "
                                         r"budget_tokens, .*max_series"):
        tm.monitor(run_dir=tmp_path, budget=10)
    assert not any(tmp_path.iterdir())  # nothing started, no folder


def test_a_bad_flag_leaves_no_run_folder(tmp_path):
    import trainmeter as tm

    with pytest.raises(ValueError):
        tm.monitor(run_dir=tmp_path / "runs", layers=2**70)
    assert not (tmp_path / "runs").exists()
