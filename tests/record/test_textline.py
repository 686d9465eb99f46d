"""The text line: docs/spec.md section 7's fields, order and units; the smoothed loss beside the raw one; aliases."""

from trainmeter.record.textline import format_line, seed_values


def test_pinned_example_matches_seed_002_format_order_and_units():
    line = format_line(1000, series={"train_loss": 2.34, "lr": 3e-4, "grad_norm": 1.2},
                       tokens_per_s=125_000, mfu=0.523, mem_used_bytes=int(71.2 * 2**30), mem_total_bytes=80 * 2**30)
    assert line == "[step 1000] loss=2.34 | lr=3.00e-04 | grad_norm=1.2 | train_tok/s=125k | mfu=52.3% | mem=71.2/80GiB"


def test_smoothed_loss_sits_beside_the_raw_one():
    line = format_line(1000, series={"train_loss": 2.34, "lr": 1e-3}, loss_ema=(2.41, 1234))
    assert line == "[step 1000] loss=2.34 (ema~1,234 2.41) | lr=1.00e-03"  # the smoothed value and its window


def test_seed_order_holds_whatever_the_series_order_and_other_series_follow_mem():
    line = format_line(3, series={"val_loss": 2.5, "grad_norm": 0.5, "lr": 0.1, "train_loss": 2.0, "absent": None},
                       tokens_per_s=10, mem_used_bytes=2**30, mem_total_bytes=4 * 2**30)
    assert line == "[step 3] loss=2 | lr=1.00e-01 | grad_norm=0.5 | train_tok/s=10.0 | mem=1.0/4.0GiB | val_loss=2.5"


def test_step_only_line():
    assert format_line(5, series={}) == "[step 5]"


def test_framework_names_fill_seed_names_only_when_trainmeters_own_are_absent():
    assert seed_values({"learning_rate": 1e-3, "grad_2.0_norm_total": 0.7, "loss": 1.0}) == {
        "train_loss": 1.0, "lr": 1e-3, "grad_norm": 0.7}
    assert seed_values({"lr": 2e-3, "learning_rate": 1e-3, "lr/head": 1e-2}) == {"lr": 2e-3}


def test_a_framework_logged_loss_beside_trainmeters_prints_loss_once():
    line = format_line(3, series=seed_values({"train_loss": 2.0, "loss": 2.0, "epoch": 0.5}))
    assert line == "[step 3] loss=2 | epoch=0.5" and line.count("loss=") == 1
