"""Logger taps: TensorBoard for real, fake W&B / MLflow / HF / Lightning modules, heavy real ones by hand."""

from __future__ import annotations

import sys
import threading
import types

import pytest
import torch

from trainmeter.core.clock import FakeClock
from trainmeter.core.patches import FINDER
from trainmeter.extensions import make_monitor
from trainmeter.integrations.extension import pair
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events


def _monitor(tmp_path, wing):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=FakeClock(), text=False, probes=False,
                        extensions=list(wing))


def _values(m, name):
    """Values of series ``name`` as written to the run log (the monitor trims what it has written)."""
    out: list[float] = []
    for event in read_events(m.run_dir / "events.jsonl"):
        if event["kind"] == "series" and event["name"] == name:
            out += event["value"]
    return out


def _scalars_in_event_files(logdir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_tensorboard_scalars_are_recorded_and_still_written(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    original = SummaryWriter.add_scalar
    m = _monitor(tmp_path / "runs", pair()).start()
    writer = SummaryWriter(str(tmp_path / "tb"))
    assert SummaryWriter.add_scalar is not original
    assert writer.add_scalar("loss", 1.5, 0) is None
    writer.add_scalar("loss", torch.tensor(1.25), global_step=1)
    writer.add_scalars("lr", {"a": 0.1, "b": 0.2}, 1)
    writer.close()
    m.finish("completed")
    assert SummaryWriter.add_scalar is original
    assert _values(m, "loss") == [1.5, 1.25]
    assert _values(m, "lr/a") == [pytest.approx(0.1)] and _values(m, "lr/b") == [pytest.approx(0.2)]
    assert _scalars_in_event_files(tmp_path / "tb", "loss") == [(0, 1.5), (1, 1.25)]


def test_a_raising_library_call_raises_the_same_exception_as_without_taps(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    with pytest.raises(Exception) as plain:
        writer.add_scalar("vec", torch.ones(3), 0)  # not a scalar: TensorBoard refuses
    m = _monitor(tmp_path / "runs", pair()).start()
    with pytest.raises(Exception) as tapped:
        writer.add_scalar("vec", torch.ones(3), 0)
    m.finish("completed")
    writer.close()
    assert type(tapped.value) is type(plain.value) and str(tapped.value) == str(plain.value)
    assert "vec" not in m.series and m.warnings == []


def test_calls_from_another_thread_are_not_recorded(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    m = _monitor(tmp_path / "runs", pair()).start()
    writer = SummaryWriter(str(tmp_path / "tb"))
    thread = threading.Thread(target=writer.add_scalar, args=("other", 2.0, 0))
    thread.start()
    thread.join()
    writer.close()
    m.finish("completed")
    assert "other" not in m.series
    assert _scalars_in_event_files(tmp_path / "tb", "other") == [(0, 2.0)]


def test_no_tap_installs_nothing(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    original = SummaryWriter.add_scalar
    m = _monitor(tmp_path / "runs", pair(tap=make_options(tap=False).tap)).start()
    assert SummaryWriter.add_scalar is original and "torch.utils.tensorboard.writer" not in FINDER.watched
    SummaryWriter(str(tmp_path / "tb")).add_scalar("loss", 1.0, 0)
    m.finish("completed")
    assert "loss" not in m.series


def _fake_wandb(monkeypatch):
    wandb = types.ModuleType("wandb")
    sdk = types.ModuleType("wandb.sdk")
    run_mod = types.ModuleType("wandb.sdk.wandb_run")

    class Run:
        def __init__(self):
            self.logged = []

        def log(self, data, step=None, commit=None):
            self.logged.append((data, step))
            if data.get("fail"):
                raise RuntimeError("wandb refused")

    run_mod.Run = Run
    run = Run()
    wandb.log = run.log  # as wandb.init does before the cell starts
    for name, mod in (("wandb", wandb), ("wandb.sdk", sdk), ("wandb.sdk.wandb_run", run_mod)):
        monkeypatch.setitem(sys.modules, name, mod)
    return wandb, Run, run


def test_wandb_log_records_scalars_only_and_is_restored(tmp_path, monkeypatch):
    wandb, Run, run = _fake_wandb(monkeypatch)
    original = Run.log
    m = _monitor(tmp_path, pair()).start()
    data = {"loss": 2.0, "acc": torch.tensor(0.5), "text": "hi", "flag": True, "vec": torch.ones(2), "n": 3}
    assert wandb.log(data, step=5) is None
    Run().log({"loss": 1.0})
    with pytest.raises(RuntimeError, match="wandb refused"):
        wandb.log({"fail": 1.0, "loss": 9.0})
    m.finish("completed")
    assert run.logged[0] == (data, 5)  # the library got the very same dict
    assert _values(m, "loss") == [2.0, 1.0]  # the refused call is not recorded
    assert _values(m, "acc") == [0.5] and _values(m, "n") == [3.0]
    assert not {"text", "flag", "vec"} & set(m.series)
    assert Run.log is original and wandb.log.__func__ is original and wandb.log.__self__ is run


@pytest.fixture
def fake_mlflow_on_disk(tmp_path, monkeypatch):
    if "mlflow" in sys.modules:
        pytest.skip("real mlflow already imported")
    root = tmp_path / "fakepkgs" / "mlflow"
    (root / "tracking").mkdir(parents=True)
    (root / "__init__.py").write_text("from mlflow.tracking.fluent import log_metric, log_metrics\n")
    (root / "tracking" / "__init__.py").write_text("")
    (root / "tracking" / "fluent.py").write_text(
        "LOGGED = []\nRESULT = object()\nERROR = ValueError('bad metric')\n"
        "def log_metric(key, value, step=None):\n"
        "    if key == 'bad':\n        raise ERROR\n    LOGGED.append((key, value, step))\n    return RESULT\n"
        "def log_metrics(metrics, step=None):\n"
        "    for k, v in metrics.items():\n        log_metric(k, v, step)\n    return RESULT\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "fakepkgs"))
    yield
    for name in ("mlflow", "mlflow.tracking", "mlflow.tracking.fluent"):
        sys.modules.pop(name, None)


def test_library_imported_during_the_run_is_tapped_and_unchanged(tmp_path, fake_mlflow_on_disk):
    m = _monitor(tmp_path, pair()).start()
    import mlflow  # imported after the start: patched by the post-import hook
    import mlflow.tracking.fluent as fluent

    assert mlflow.log_metric("acc", 0.9, step=1) is fluent.RESULT
    assert mlflow.log_metrics({"loss": 0.5, "lr": 0.01}, step=2) is fluent.RESULT  # inner calls count once
    with pytest.raises(ValueError) as caught:
        mlflow.log_metric("bad", 1.0)
    assert caught.value is fluent.ERROR
    assert mlflow.__loader__.__class__.__name__ == "SourceFileLoader"
    m.finish("completed")
    assert fluent.LOGGED == [("acc", 0.9, 1), ("loss", 0.5, 2), ("lr", 0.01, 2)]
    assert _values(m, "acc") == [0.9] and _values(m, "loss") == [0.5] and "bad" not in m.series
    assert not hasattr(mlflow.log_metric, "__trainmeter_original__")
    assert not hasattr(fluent.log_metric, "__trainmeter_original__")
    assert mlflow.log_metric is fluent.log_metric
    assert FINDER not in sys.meta_path


def _fake_trainer(monkeypatch):
    """A module ``transformers.trainer`` whose ``Trainer`` logs as HF's does: ``train`` calls ``log``, which adds
    the epoch and hands the logs to each callback's ``on_log`` (a reporting one writes them to TensorBoard)."""
    trainer_mod = types.ModuleType("transformers.trainer")

    class Report:  # as HF's TensorBoardCallback
        def __init__(self, writer):
            self.writer = writer

        def on_log(self, args, state, control, logs=None, **kwargs):
            for k, v in logs.items():
                self.writer.add_scalar(f"train/{k}", v, 0)

    class Trainer:
        def __init__(self, logs, writer=None):
            self.args = types.SimpleNamespace(include_num_input_tokens_seen="no")
            self.callback_handler = types.SimpleNamespace(callbacks=[Report(writer)] if writer else [])
            self.logs = logs

        def remove_callback(self, callback):
            self.callback_handler.callbacks.remove(callback)

        def log(self, logs, start_time=None):
            logs["epoch"] = 1.0
            for callback in self.callback_handler.callbacks:
                callback.on_log(self.args, None, None, logs=logs)

        def train(self):
            for logs in self.logs:
                self.log(dict(logs))

    trainer_mod.Trainer = Trainer
    monkeypatch.setitem(sys.modules, "transformers.trainer", trainer_mod)
    return Trainer


def test_trainer_log_going_on_to_tensorboard_is_recorded_once(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from torch.utils.tensorboard import SummaryWriter

    Trainer = _fake_trainer(monkeypatch)
    m = _monitor(tmp_path / "runs", pair()).start()
    writer = SummaryWriter(str(tmp_path / "tb"))
    trainer = Trainer([{"loss": 0.75, "learning_rate": 1e-3}], writer)
    trainer.train()
    writer.add_scalar("direct", 4.0, 0)
    writer.close()
    m.finish("completed")
    assert _values(m, "loss") == [0.75] and _values(m, "learning_rate") == [pytest.approx(1e-3)]
    assert "train/loss" not in m.series and "epoch" not in m.series and _values(m, "direct") == [4.0]
    assert _scalars_in_event_files(tmp_path / "tb", "train/loss") == [(0, 0.75)]
    assert len(trainer.callback_handler.callbacks) == 1  # ours left with the train call


def test_lightning_logged_metrics_are_recorded(tmp_path, monkeypatch):
    name = "lightning.pytorch.trainer.connectors.logger_connector.logger_connector"
    mod = types.ModuleType(name)

    class _LoggerConnector:
        def log_metrics(self, metrics, step=None):
            return sorted(metrics)

    mod._LoggerConnector = _LoggerConnector
    monkeypatch.setitem(sys.modules, name, mod)
    m = _monitor(tmp_path, pair()).start()
    out = _LoggerConnector().log_metrics({"val_loss": torch.tensor(0.25), "epoch": 2}, step=10)
    m.finish("completed")
    assert out == ["epoch", "val_loss"]
    assert _values(m, "val_loss") == [0.25] and _values(m, "epoch") == [2.0]
    assert not hasattr(_LoggerConnector.log_metrics, "__trainmeter_original__")


def test_a_logged_train_loss_gets_its_librarys_name_and_never_joins_the_captured_series(tmp_path, monkeypatch):
    name = "lightning.pytorch.trainer.connectors.logger_connector.logger_connector"
    mod = types.ModuleType(name)

    class _LoggerConnector:
        def log_metrics(self, metrics, step=None):
            return None

    mod._LoggerConnector = _LoggerConnector
    monkeypatch.setitem(sys.modules, name, mod)
    m = _monitor(tmp_path, pair()).start()
    _LoggerConnector().log_metrics({"train_loss": 0.5, "lr": 0.1})
    m.finish("completed")
    assert "train_loss" not in m.series
    assert _values(m, "lightning.train_loss") == [0.5] and _values(m, "lr") == [0.1]
    assert m.series_info["lightning.train_loss"]["source"] == "logged through lightning (tap)"


def test_the_trainers_end_of_run_summary_is_kept_as_summary_values_not_points(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    Trainer = _fake_trainer(monkeypatch)
    taps, wing = pair()
    m = _monitor(tmp_path / "runs", (taps, wing)).start()
    Trainer([{"loss": 2.0}, {"train_runtime": 12.5, "train_loss": 2.25, "total_flos": 3}]).train()
    m.finish("completed")
    assert _values(m, "loss") == [2.0] and "train_runtime" not in m.series and "epoch" not in m.series
    assert "train_loss" not in m.series and "transformers.train_loss" not in m.series
    summary = taps.passport_section()["summaries"]["transformers"]
    assert summary == {"train_runtime": 12.5, "train_loss": 2.25, "total_flos": 3.0}  # as the Trainer got them


@pytest.mark.heavy
def test_real_mlflow_with_a_local_file_store_is_tapped(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x keeps the file store behind this switch
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    m = _monitor(tmp_path / "runs", pair()).start()
    try:
        with mlflow.start_run() as run:
            mlflow.log_metric("loss", 0.5, step=1)
            mlflow.log_metrics({"acc": 0.9}, step=1)
    finally:
        m.finish("completed")
    assert _values(m, "loss") == [0.5] and _values(m, "acc") == [0.9]
    history = mlflow.tracking.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert [(h.step, h.value) for h in history] == [(1, 0.5)]


@pytest.mark.heavy
def test_real_wandb_offline_is_tapped(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    m = _monitor(tmp_path / "runs", pair()).start()
    try:
        run = wandb.init(project="trainmeter-test", dir=str(tmp_path), mode="offline")
        wandb.log({"loss": 0.5}, step=1)
        run.log({"loss": 0.25}, step=2)
        run.finish()
    finally:
        m.finish("completed")
    assert _values(m, "loss") == [0.5, 0.25]
