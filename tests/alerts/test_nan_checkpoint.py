"""nan:checkpoint-stop saves the last finite state, names its step and marks it the recovery point; with no finite
state it says so instead of saving (docs/spec.md section 21)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402

NAN_AT = 7


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def _batch(i: int):
    g = torch.Generator().manual_seed(i)
    x = torch.randn(8, 4, generator=g)
    if i == NAN_AT:
        x[0, 0] = float("nan")  # the data goes bad: a NaN loss, NaN gradients, NaN weights after the step
    return x, torch.randn(8, 1, generator=g)


def _hand_loop(model, opt, after: list[dict], steps: int = 20) -> None:
    """The loop, keeping in ``after`` the weights after each step it finished (the test's own record)."""
    for i in range(1, steps + 1):
        x, y = _batch(i)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        after.append({k: v.clone() for k, v in model.state_dict().items()})


def test_nan_checkpoint_stop_saves_the_finite_weights_of_the_step_before_and_marks_them_the_recovery_point(
        run_root):
    model, opt = _model()
    seen: list[dict] = []
    with tm.monitor(run_dir=run_root, name="nan", alert=["nan:checkpoint-stop"]) as m:
        _hand_loop(model, opt, seen)
    p = _passport(m)
    assert p["status"] == "stopped" and p["stopped_at_step"] == NAN_AT and len(seen) == NAN_AT - 1  # StopTraining
    assert not torch.isfinite(model[0].weight).all()  # the loop's own weights are poisoned: the step ran unchanged
    [ckpt] = p["checkpoints"]
    assert ckpt["step"] == NAN_AT - 1 and ckpt["path"] == f"checkpoints/step-{NAN_AT - 1}.pt"
    assert ckpt["recovery"].startswith(f"the recovery point: the weights after step {NAN_AT - 1}, saved before "
                                       f"step {NAN_AT}")
    saved = torch.load(m.run_dir / ckpt["path"])
    assert all(torch.isfinite(t).all() for t in saved["model"].values())
    assert all(torch.equal(saved["model"][k], v) for k, v in seen[NAN_AT - 2].items())  # exactly step 6's weights
    assert "recovery point" in (m.run_dir / "passport.md").read_text()


def test_a_nan_checkpoint_stop_with_no_finite_state_left_says_so_instead_of_saving(run_root):
    model, opt = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)  # its loss computed inside step(closure): known after it
    with pytest.warns(tm.core.monitor.MonitorWarning, match="no finite state to save"):
        with tm.monitor(run_dir=run_root, name="closure", alert=["nan:checkpoint-stop"]) as m:
            for i in range(1, 20):
                x, y = _batch(i)

                def closure(x=x, y=y):
                    opt.zero_grad()
                    loss = F.mse_loss(model(x), y)
                    loss.backward()
                    return loss

                opt.step(closure)
    p = _passport(m)
    assert p["status"] == "stopped" and p["checkpoints"] == []
    [refused] = p["checkpoints_refused"]
    assert refused["reason"].startswith(f"no finite state to save: 4 of 4 tensors of the weights after step {NAN_AT}")
    assert not (m.run_dir / "checkpoints").exists() or not list((m.run_dir / "checkpoints").iterdir())
