"""tm.calibrate(): the measured matmul ceiling, its math on a fake clock, and "of achievable" in a CPU run."""

import json

import pytest

from trainmeter.compute import calibrate
from trainmeter.compute.calibrate import (
    Calibration,
    Ceiling,
    achieved_flops_per_s,
    last_calibration,
    run_dtype,
    time_matmuls,
)
from trainmeter.core.clock import FakeClock


@pytest.fixture(autouse=True)
def _no_kept_calibration(monkeypatch):
    monkeypatch.setattr(calibrate, "_LAST", None)  # none kept from before; a test's own is not kept after


def test_achieved_rate_is_two_mnk_times_repeats_over_seconds():
    assert achieved_flops_per_s((1000, 2000, 3000), 5, 2.0) == 2 * 1000 * 2000 * 3000 * 5 / 2.0
    assert achieved_flops_per_s((8, 8, 8), 3, 0.0) is None
    assert achieved_flops_per_s((8, 8, 8), 0, 1.0) is None


def test_timing_runs_until_the_minimum_seconds_on_the_clock_after_one_untimed_call():
    clock = FakeClock()
    calls = []
    syncs = []

    def once():
        calls.append(clock())
        clock.advance(0.1)

    repeats, seconds = time_matmuls(once, lambda: syncs.append(1), clock=clock, min_seconds=0.35, max_repeats=100)
    assert repeats == 4  # clock read at 1, 2, 4 repeats: 0.4 s >= 0.35 s
    assert seconds == pytest.approx(0.4)
    assert len(calls) == 5  # one warm-up call, untimed
    assert syncs  # every clock read follows a synchronize


def test_timing_stops_at_max_repeats():
    clock = FakeClock()
    repeats, seconds = time_matmuls(lambda: clock.advance(0.001), lambda: None, clock=clock, min_seconds=10.0,
                                    max_repeats=6)
    assert repeats == 6 and seconds == pytest.approx(0.006)


def test_run_dtype_maps_float32_to_tf32_only_on_cuda_when_allowed():
    assert run_dtype("torch.float32", on_cuda=False, tf32_allowed=True) == "fp32"
    assert run_dtype("torch.float32", on_cuda=True, tf32_allowed=True) == "tf32"
    assert run_dtype("torch.float32", on_cuda=True, tf32_allowed=False) == "fp32"
    assert run_dtype("torch.bfloat16", on_cuda=True, tf32_allowed=True) == "bf16"
    assert run_dtype(None, on_cuda=False, tf32_allowed=False) is None


def test_ceiling_names_its_shape_and_duration_and_is_measured():
    c = Ceiling(device="cpu", device_name="cpu", dtype="fp32", shape=(64, 64, 64), repeats=8, seconds=0.5,
                flops_per_s=8.0)
    assert "8 dense fp32 matmuls 64x64 @ 64x64 in 0.5 s" in c.source
    assert c.to_dict()["provenance"] == "measured" and c.to_dict()["shape"] == [64, 64, 64]
    assert Calibration(ceilings={"fp32": c}, skipped={}).ceiling("fp32") is c


torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.conftest import tiny_model_and_data, train_steps  # noqa: E402


def test_a_real_tiny_cpu_calibration_measures_a_positive_rate_and_skips_tf32_saying_why():
    cal = tm.calibrate(["fp32", "tf32"], device="cpu", size=64, min_seconds=0.01)
    c = cal.ceilings["fp32"]
    assert c.device == "cpu" and c.shape == (64, 64, 64) and c.repeats >= 1 and c.seconds > 0
    assert c.flops_per_s == pytest.approx(2 * 64**3 * c.repeats / c.seconds)
    assert "CPU has none" in cal.skipped["tf32"]
    assert last_calibration() is cal


def test_bad_calibration_arguments_raise_naming_the_value():
    with pytest.raises(ValueError, match="'int4'.*fp32, tf32, bf16, fp16"):
        tm.calibrate(["int4"], device="cpu")
    with pytest.raises(ValueError, match="size must be"):
        tm.calibrate(["fp32"], device="cpu", size=3)


def test_nothing_is_measured_unless_called(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root) as m:
        train_steps(model, opt, batches)
    assert last_calibration() is None
    c = json.loads((m.run_dir / "passport.json").read_text())["compute"]
    assert c["ceiling"] is None and all(v is None for v in c["of_achievable"].values())
    assert "tm.calibrate()" in c["of_achievable_missing"]


def test_a_cpu_run_after_calibrate_shows_of_achievable_as_measured_beside_absent_mfu(run_root):
    cal = tm.calibrate(["fp32"], device="cpu", size=64, min_seconds=0.01)
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf") as m:
        train_steps(model, opt, batches)
    p = json.loads((m.run_dir / "passport.json").read_text())
    c = p["compute"]
    assert c["mfu"]["hf"] is None  # no datasheet peak on the CPU
    ceiling = cal.ceilings["fp32"].flops_per_s
    want = c["flops_per_token"]["hf"] * p["throughput"]["train_tokens_per_s"] / ceiling
    assert c["of_achievable"]["hf"] == pytest.approx(want)
    assert c["ceiling"]["provenance"] == "measured" and c["ceiling"]["dtype"] == "fp32"
    d = {x["name"]: x for x in p["derivations"]}["of_achievable[hf]"]
    inputs = {i["name"]: i for i in d["inputs"]}
    assert inputs["ceiling"]["provenance"] == "measured" and "tm.calibrate()" in inputs["ceiling"]["source"]
    md = (m.run_dir / "passport.md").read_text()
    assert "Of achievable (over the measured ceiling): `hf`" in md and "measured by tm.calibrate()" in md


def test_calibrate_inside_a_run_is_credited_to_profiling(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root) as m:
        train_steps(model, opt, batches[:2])
        tm.calibrate(["fp32"], device="cpu", size=64, min_seconds=0.01)
        train_steps(model, opt, batches[2:])
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["phases_s"]["profiling"] > 0


def test_calibrate_prints_a_short_table_of_its_ceilings_and_skips():
    c = Ceiling(device="cuda:0", device_name="NVIDIA H100 80GB HBM3", dtype="bf16", shape=(8192, 8192, 8192),
                repeats=40, seconds=0.29, flops_per_s=7.6e14)
    text = repr(Calibration(ceilings={"bf16": c}, skipped={"fp16": "RuntimeError: no"}))
    assert text.splitlines() == [
        "tm.calibrate(): measured dense-matmul ceilings on NVIDIA H100 80GB HBM3 (cuda:0)",
        "dtype  ceiling      matmuls              time",
        "bf16   760 TFLOP/s  40 x 8192x8192x8192  0.29 s",
        "fp16   skipped: RuntimeError: no"]


def test_after_calibrate_the_mfu_tile_shows_the_measured_of_achievable_and_asks_for_nothing_done(run_root):
    from trainmeter.widget.show import replay

    tm.calibrate(["fp32"], device="cpu", size=64, min_seconds=0.01)
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf") as m:
        train_steps(model, opt, batches)
    achievable = json.loads((m.run_dir / "passport.json").read_text())["compute"]["of_achievable"]["hf"]
    tile = {t["id"]: t for t in replay(m.run_dir)[0]["tiles"]}["mfu"]
    assert tile["value"] == pytest.approx(achievable) and tile["label"] == "of achievable (hf)"
    assert tile["sub"].startswith(f"of achievable {tile['text']} (measured: tm.calibrate() ceiling ")
    assert [d["name"] for d in tile["derivations"]] == ["of_achievable[hf]"] and "missing" not in tile
    assert "call tm.calibrate()" not in json.dumps(tile) and tile["provenance"] == "detected"
    md = (m.run_dir / "passport.md").read_text()
    assert "call tm.calibrate()" not in md and "of achievable, measured, is below" in md


def test_without_a_calibration_the_cpu_mfu_tile_says_calibrate_would_measure_one(run_root):
    from trainmeter.widget.show import replay

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, convention="hf") as m:
        train_steps(model, opt, batches)
    tile = {t["id"]: t for t in replay(m.run_dir)[0]["tiles"]}["mfu"]
    assert tile["value"] is None and "call tm.calibrate() for a measured of-achievable" in tile["missing"]
