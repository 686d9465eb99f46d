"""Data out: to_pandas shapes and dtypes, TensorBoard export read back with TensorBoard's reader, offline W&B."""

from __future__ import annotations

import importlib.util
import math

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.export import report_scalars
from trainmeter.record.runs import load


@pytest.fixture
def run(tmp_path):
    clock = FakeClock()
    m = make_monitor(make_options(name="exp", run_dir=tmp_path / "runs", interval_s=10), clock=clock, text=False,
                     probes=False, extensions=[]).start()
    for step in range(1, 51):
        clock.advance(1.0)
        m.record({"train_loss": 3.0 - step / 100, "lr": 1e-3}, step=step)
        if step == 25:
            m.record({"val_loss": math.nan}, step=step)
        m.on_step(128)
    m.finish("completed")
    return load(m.run_dir)


def test_to_pandas_gives_tidy_frames_with_stated_dtypes(run) -> None:
    f = run.to_pandas()
    assert list(f.series.columns) == ["name", "x_kind", "step", "t_s", "value"]
    assert f.series.dtypes.astype(str).to_dict() == {"name": "category", "x_kind": "category", "step": "int64",
                                                     "t_s": "float64", "value": "float64"}
    assert (f.series["name"] == "train_loss").sum() == 50 and (f.series["name"] == "lr").sum() == 50
    val = f.series[f.series["name"] == "val_loss"]
    assert len(val) == 1 and math.isnan(val["value"].iloc[0])
    assert f.series.loc[f.series["name"] == "train_loss", "t_s"].iloc[-1] == pytest.approx(50.0)
    assert f.steps.shape == (50, 3) and f.steps["tokens"].sum() == 50 * 128 and str(f.steps["tokens"].dtype) == "int64"
    assert len(f.intervals) == len([e for e in run.events() if e["kind"] == "interval"])
    assert {"step", "tokens", "elapsed_s", "throughput.train_tokens_per_s", "phases_s.train"} <= set(f.intervals.columns)


def test_tensorboard_export_reads_back_with_tensorboards_event_accumulator(run, tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = run.export_tensorboard(tmp_path / "tb")
    acc = EventAccumulator(str(path.parent), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train_loss", "lr", "tokens_per_step", "throughput/train_tokens_per_s", "phases_s/train"} <= tags
    loss = acc.Scalars("train_loss")
    assert [e.step for e in loss] == list(range(1, 51))
    assert loss[-1].value == pytest.approx(2.5)
    assert loss[1].wall_time - loss[0].wall_time == pytest.approx(1.0, abs=1e-3)
    assert "val_loss" not in tags  # its only point was NaN (null in the log): nothing to draw
    assert path.name.endswith(".trainmeter.exp")  # no host name in the file name


def test_report_scalars_keep_numbers_only() -> None:
    rec = {"step": 3, "throughput": {"train_tokens_per_s": 10.0, "x": None}, "compute": {"mfu[hf]": 0.3},
           "energy": {"source": "rapl", "joules": 5}, "gpu": {"0": {"util_gpu": 1.0}}}
    assert report_scalars(rec) == {"throughput/train_tokens_per_s": 10.0, "compute/mfu[hf]": 0.3,
                                   "energy/joules": 5.0}


def test_wandb_export_rejects_a_bad_mode_before_importing_wandb(run) -> None:
    with pytest.raises(ValueError, match="valid are offline, online, disabled"):
        run.export_wandb(project="p", mode="cloud")


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_export_offline_logs_every_step_without_network(run, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    run.export_wandb(project="trainmeter-test", wandb_dir=tmp_path)
    (log,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")  # the offline run's record log
    data = log.read_bytes()  # protobuf records: keys and JSON values appear as plain bytes
    assert b"train_loss" in data and b"throughput/train_tokens_per_s" in data
    assert b"2.5" in data and b'"completed"' in data
