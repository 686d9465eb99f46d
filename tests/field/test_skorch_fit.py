"""skorch: ``NeuralNetClassifier.fit`` on a tiny MLP with validation each epoch, its stop and its Checkpoint."""

from __future__ import annotations

import pickle
import pickletools
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("skorch")

import numpy as np  # noqa: E402
from skorch import NeuralNetClassifier  # noqa: E402
from skorch.callbacks import Callback, Checkpoint  # noqa: E402
from skorch.dataset import ValidSplit  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

ROWS, BATCH, EPOCHS = 60, 16, 3  # ValidSplit(4): 45 training rows (16 + 16 + 13) and 15 validation rows a epoch
TRAIN_ROWS = ROWS - ROWS // 4
STEPS = EPOCHS * -(-TRAIN_ROWS // BATCH)
EVAL_SLEEP_S = 0.2  # in each validation forward: one validation batch a epoch
SAVE_SLEEP_S = 0.2  # inside each Checkpoint save, at each read of the module's state dict


class MLP(torch.nn.Module):
    def __init__(self, sleeps: bool = False) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        self.sleeps, self.saves_slept = sleeps, 0
        if sleeps:
            self.register_state_dict_post_hook(lambda *a: self._slow_save())  # torch marks the function it gets

    def _slow_save(self):
        time.sleep(SAVE_SLEEP_S)
        self.saves_slept += 1  # skorch's save_params reads the state dict twice

    def forward(self, X):
        if self.sleeps and not self.training:  # skorch's own validation loop
            time.sleep(EVAL_SLEEP_S)
        return self.layers(X)


class Counts(Callback):
    """The test's own counts: optimizer steps (a step post-hook) and training samples (a forward pre-hook)."""

    def __init__(self, stop_at: int = 0, saved: list | None = None) -> None:
        self.steps, self.samples, self.stop_at, self.saved = 0, 0, stop_at, saved

    def on_train_begin(self, net, **kwargs):
        net.optimizer_.register_step_post_hook(lambda *a: setattr(self, "steps", self.steps + 1))
        net.module_.register_forward_pre_hook(self._batch)

    def _batch(self, module, args):
        if module.training and torch.is_grad_enabled():
            self.samples += args[0].shape[0]

    def on_batch_end(self, net, training=None, **kwargs):
        if training and self.steps == self.stop_at:  # the controls wing asks at a step boundary
            control = self.m.extension("frameworks").control
            assert control.name == "skorch" and control.request_stop() is True
            self.saved.append(control.save_checkpoint(str(self.saved_dir), f"step-{self.steps}"))


def _net(callbacks=(), sleeps: bool = False, epochs: int = EPOCHS):
    rng = np.random.RandomState(0)
    X = rng.randn(ROWS, 4).astype("float32")
    y = (X.sum(1) > 0).astype("int64")
    net = NeuralNetClassifier(MLP, module__sleeps=sleeps, criterion=torch.nn.CrossEntropyLoss, max_epochs=epochs,
                              lr=0.1, batch_size=BATCH,
                              train_split=ValidSplit(4), verbose=0, callbacks=list(callbacks))
    torch.manual_seed(0)
    return net, X, y


def _batch_losses(net):
    return [b["train_loss"] for row in net.history for b in row["batches"] if "train_loss" in b]


def test_skorch_fit_counts_steps_samples_and_loss_records_its_epochs_and_times_its_validation(tmp_path, printed):
    bare_net, X, y = _net()
    with printed() as bare:
        started_s = time.perf_counter()
        bare_net.fit(X, y)
        bare_s = time.perf_counter() - started_s
    counts = Counts(stop_at=-1)
    net, X, y = _net([counts], sleeps=True)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        net.fit(X, y)
    p = passport(m)
    assert _batch_losses(net) == _batch_losses(bare_net)  # bit-identical, with and without trainmeter
    assert net.history[:, "valid_loss"] == bare_net.history[:, "valid_loss"]
    assert m.steps == counts.steps == STEPS and p["frameworks"]["framework_steps"] == {"skorch": STEPS}
    assert m.tokens == counts.samples == EPOCHS * TRAIN_ROWS and m.token_unit == "samples"
    assert p["series_info"]["tokens_per_step"]["source"] == "skorch on_batch_begin X"
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(_batch_losses(net), rel=1e-6)
    epoch_ends = [STEPS // EPOCHS * (e + 1) for e in range(EPOCHS)]
    assert logged(m, "valid_loss") == list(zip(epoch_ends, net.history[:, "valid_loss"], strict=True))
    assert logged(m, "valid_acc") == list(zip(epoch_ends, net.history[:, "valid_acc"], strict=True))
    assert [v for _, v in logged(m, "skorch.train_loss")] == net.history[:, "train_loss"]  # its epoch mean
    assert p["series"]["valid_loss"]["last"] == net.history[-1, "valid_loss"]
    assert within(p["phases_s"]["eval"], EPOCHS * EVAL_SLEEP_S, bare_s), (p["phases_s"], bare_s)
    assert "trainmeter" not in dict(net.callbacks_)  # ours left with the fit
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_skorch_stops_at_the_step_asked_by_its_own_stop_and_saves_through_save_params(tmp_path):
    counts = Counts(stop_at=4, saved=[])
    counts.saved_dir = tmp_path
    net, X, y = _net([counts])
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        counts.m = m
        net.fit(X, y)  # skorch's partial_fit catches its own stop: nothing raised here
    assert m.steps == counts.steps == 4 and passport(m)["status"] == "completed"
    assert counts.saved == [str(tmp_path / "step-4.pt")] and Path(counts.saved[0]).stat().st_size > 0
    assert m.extension("frameworks").control is None  # the fit is over


class Sizes(Callback):
    """After ``Checkpoint`` at each epoch's end: the size of each file in ``folder`` then."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.seen = folder, []

    def on_epoch_end(self, net, **kwargs):
        self.seen.append({f: f.stat().st_size for f in self.folder.rglob("*") if f.is_file()})


def test_skorch_checkpoint_is_one_record_per_save_with_its_final_path_and_bytes(tmp_path):
    """Needs the evalckpt branch (one checkpoint per outermost save, its final path and bytes)."""
    saves = tmp_path / "cp"
    sizes = Sizes(saves)
    net, X, y = _net([Checkpoint(monitor=None, dirname=str(saves)), sizes], sleeps=True, epochs=2)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        net.fit(X, y)
    p = passport(m)
    saved = sum(bool(row.get("event_cp")) for row in net.history)
    assert saved == 2 and len(p["checkpoints"]) == saved == p["time"]["checkpoint_saves"], p["checkpoints"]
    for record, seen in zip(p["checkpoints"], sizes.seen, strict=True):
        path = Path(record["path"])  # the folder of the files one save wrote, or its one file
        files = [f for f in seen if path in (f, *f.parents)]
        assert files and saves in (path, *path.parents) and record["bytes"] == sum(seen[f] for f in files), record
    assert within(p["phases_s"]["checkpoint"], net.module_.saves_slept * SAVE_SLEEP_S), p["phases_s"]


def test_skorch_early_stopping_still_records_its_last_epoch(tmp_path):
    from skorch.callbacks import EarlyStopping

    stop = EarlyStopping(patience=1, threshold=10.0, threshold_mode="abs")  # the second epoch misses: it stops there
    net, X, y = _net([stop])
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        net.fit(X, y)
    assert len(net.history) == 2 < EPOCHS
    assert [v for _, v in logged(m, "valid_loss")] == net.history[:, "valid_loss"]


class Pickles(Callback):
    """Pickles the net at its epoch's end (as ``Checkpoint(f_pickle=...)`` does)."""

    def on_epoch_end(self, net, **kwargs):
        self.pickled = pickle.dumps(net)


def test_a_skorch_net_pickled_during_its_fit_carries_nothing_of_trainmeter(tmp_path):
    pickles = Pickles()
    net, X, y = _net([pickles], epochs=1)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600):
        net.fit(X, y)
    strings = [arg for op, arg, _ in pickletools.genops(pickles.pickled) if isinstance(arg, str)]
    assert not [s for s in strings if s.startswith("trainmeter.")]  # no class of ours: it loads without trainmeter
    loaded = pickle.loads(pickles.pickled)
    assert type(dict(loaded.callbacks_)["trainmeter"]) is Callback  # a no-op in our callback's place
    assert loaded.history[:, "valid_loss"] == net.history[:, "valid_loss"]
