from trainmeter.record.textline import format_line


def test_line_follows_seed_002_format_and_leaves_absent_fields_out():
    line = format_line(1000, series={"train_loss": 2.34, "lr": 3e-4, "grad_norm": 1.2, "val_loss": None},
                       tokens_per_s=125_000, mfu=0.523, mem_used_bytes=71.2 * 2**30, mem_total_bytes=80 * 2**30)
    assert line == "[step 1000] loss=2.34 | lr=3.00e-04 | grad_norm=1.2 | tok/s=125k | mfu=52.3% | mem=71.2/80.0GiB"


def test_step_only_line():
    assert format_line(5, series={}) == "[step 5]"
