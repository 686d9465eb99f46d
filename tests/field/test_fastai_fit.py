"""fastai (``fastai.basics``): ``Learner.fit`` with its own Adam (not torch.optim), validation and SaveModelCallback."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastai.basics")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us, within  # noqa: E402

ROWS, VALID, BATCH, EPOCHS = 48, 16, 8, 2
EVAL_SLEEP_S = 0.4  # per validation batch: 2 per epoch
SAVE_SLEEP_S = 0.6  # inside each learn.save (the model's state dict is read there), one per epoch


def _learner(out_dir, sleeps: bool):
    from fastai.basics import Callback, DataLoaders, Learner, MSELossFlat, set_seed
    from fastai.callback.tracker import SaveModelCallback

    set_seed(0, reproducible=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS + VALID, 4, generator=g)
    rows = list(zip(x, x.sum(1, keepdim=True), strict=True))
    dls = DataLoaders.from_dsets(rows[:ROWS], rows[ROWS:], bs=BATCH, shuffle=False, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    if sleeps:
        model.register_state_dict_post_hook(lambda *a: time.sleep(SAVE_SLEEP_S))

    class Losses(Callback):  # the loop's own loss of each step; a slow validation
        order = 60

        def __init__(self):
            self.losses = []

        def after_step(self):
            self.losses.append(float(self.learn.loss))

        def after_batch(self):
            if sleeps and not self.learn.training:
                time.sleep(EVAL_SLEEP_S)

    losses = Losses()
    learn = Learner(dls, model, loss_func=MSELossFlat(), path=out_dir,
                    cbs=[losses, SaveModelCallback(every_epoch=True, with_opt=True)])
    return learn, losses


def test_fastai_fit_counts_steps_samples_and_loss_and_times_eval_and_checkpoints(tmp_path, printed):
    bare_learn, bare_losses = _learner(tmp_path / "bare", sleeps=False)
    with printed() as bare:
        started_s = time.perf_counter()
        bare_learn.fit(EPOCHS, 1e-2)
        bare_s = time.perf_counter() - started_s
    learn, losses = _learner(tmp_path / "ours", sleeps=True)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        learn.fit(EPOCHS, 1e-2)
    p = passport(m)
    steps = EPOCHS * ROWS // BATCH
    assert losses.losses == bare_losses.losses  # bit-identical, with and without trainmeter
    assert m.steps == steps == learn.train_iter  # fastai's Adam is not torch.optim: 0 before
    assert m.tokens == EPOCHS * ROWS and m.token_unit == "samples"
    assert p["frameworks"]["framework_steps"] == {"fastai": steps}
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(losses.losses, rel=1e-6)
    valid = [row[1] for row in learn.recorder.values]  # [train_loss, valid_loss] per epoch
    assert [v for _, v in logged(m, "valid_loss")] == pytest.approx(valid)
    assert logged(m, "fastai.train_loss")  # its smoothed loss, apart from trainmeter's own
    assert within(p["phases_s"]["eval"], EPOCHS * (VALID // BATCH) * EVAL_SLEEP_S, bare_s), (p["phases_s"], bare_s)
    # SaveModelCallback saves after validation: checkpoint time, not eval
    assert within(p["phases_s"]["checkpoint"], EPOCHS * SAVE_SLEEP_S, bare_s), (p["phases_s"], bare_s)
    assert [(c["step"], c["source"]) for c in p["checkpoints"]] == [
        (steps // EPOCHS * (e + 1), "fastai Learner.save") for e in range(EPOCHS)]
    assert all(c["bytes"] > 0 for c in p["checkpoints"]) and p["time"]["checkpoint_saves"] == EPOCHS
    # the rate its own Adam applied at each step (fit without a schedule: the lr given)
    assert [v for _, v in logged(m, "lr")] == [1e-2] * steps and p["optim"]["lr"]["missing"] is None
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []


def test_fastai_one_cycle_rate_is_the_one_each_step_applied(tmp_path):
    import fastai.callback.schedule  # noqa: F401  (adds Learner.fit_one_cycle)

    learn, _ = _learner(tmp_path / "ours", sleeps=False)
    learn.remove_cb(learn.cbs.filter(lambda cb: type(cb).__name__ == "SaveModelCallback")[0])
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        learn.fit_one_cycle(1, 1e-2)
    assert [v for _, v in logged(m, "lr")] == learn.recorder.lrs  # the Recorder's rate of each batch, one group
    assert len(learn.recorder.lrs) == m.steps == ROWS // BATCH and m.warnings == []
