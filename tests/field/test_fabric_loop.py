"""Lightning Fabric: a hand loop through ``fabric.setup``/``backward``, evaluations by hand, ``fabric.save``."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lightning.fabric")

import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import Sleeper, logged, passport, printed_by_us, within  # noqa: E402

STEPS, BATCH, EVERY = 6, 4, 3
EVAL_SLEEP_S = 0.4  # inside each hand evaluation
SAVE_SLEEP_S = 0.5  # pickled inside each fabric.save (into Fabric's buffer, then written to the file)


def _loop(out_dir, sleeps: bool):
    """The loop: an evaluation by hand every EVERY steps (the first merely in eval mode, the second under
    ``tm.phase("eval")``), then ``fabric.save``. Its losses, the training rows its model saw, the files saved."""
    from lightning.fabric import Fabric

    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    rows: list[int] = []
    model.register_forward_pre_hook(lambda mod, args: rows.append(len(args[0])) if torch.is_grad_enabled() else None)
    model, opt = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    x = torch.randn(STEPS * BATCH, 4, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=BATCH))
    losses, saved = [], []
    for i, (xb, yb) in enumerate(loader, 1):
        loss = F.mse_loss(model(xb), yb)
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if i % EVERY == 0:
            model.eval()
            with tm.phase("eval") if i > EVERY else contextlib.nullcontext(), torch.no_grad():
                F.mse_loss(model(x[:BATCH]), x[:BATCH].sum(1, keepdim=True))
                time.sleep(EVAL_SLEEP_S if sleeps else 0.0)
            model.train()
            path = out_dir / f"step-{i}.ckpt"
            fabric.save(path, {"model": model, "optimizer": opt, "slow": Sleeper(SAVE_SLEEP_S if sleeps else 0.0)})
            saved.append(path)
    fabric.load(saved[-1], {"model": model}, strict=False, weights_only=False)  # checkpoint time, no record
    return losses, rows, saved


def test_fabric_loop_counts_steps_samples_loss_and_times_saves_to_their_final_files(tmp_path, printed):
    with printed() as bare:
        bare_losses, _, _ = _loop(tmp_path / "bare", sleeps=False)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        losses, rows, saved = _loop(tmp_path / "ours", sleeps=True)
    p = passport(m)
    assert losses == bare_losses  # bit-identical, with and without trainmeter
    assert m.steps == STEPS  # the _FabricOptimizer steps the SGD it wraps: one step each
    assert m.tokens == sum(rows) == STEPS * BATCH and m.token_unit == "samples"
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(losses, rel=1e-6)
    assert p["frameworks"]["fits"] == {"fabric": 1}
    # the model merely in eval mode is inference; the evaluation that says so is eval
    assert within(p["phases_s"]["inference"], EVAL_SLEEP_S) and within(p["phases_s"]["eval"], EVAL_SLEEP_S)
    assert p["time"]["eval_spans"] == 1
    # one record per fabric.save, its whole time (the pickling into a buffer and the write), the final file
    assert within(p["phases_s"]["checkpoint"], 2 * SAVE_SLEEP_S), p["phases_s"]
    assert [(c["path"], c["step"], c["source"]) for c in p["checkpoints"]] == [
        (str(path), int(path.stem.split("-")[1]), "lightning Fabric.save") for path in saved]
    assert [c["bytes"] for c in p["checkpoints"]] == [os.path.getsize(path) for path in saved]
    assert p["time"]["checkpoint_saves"] == 2 and all(c["seconds"] >= SAVE_SLEEP_S for c in p["checkpoints"])
    assert printed_by_us(bare, ours) == [] and p["warnings"] == []
