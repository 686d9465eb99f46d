"""One step axis across a training's runs (docs/spec.md section 22): a resumed run records and draws its points at
steps of the training, and its dashboard shows the parent's curve before its own."""

from __future__ import annotations

import json

import torch

import trainmeter as tm
import trainmeter.widget.show as display_module
from trainmeter.record.events import LOG_FILE, iter_events


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _step(model, opt, step: int) -> None:
    x = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(step))
    torch.nn.functional.cross_entropy(model(x), x[:, 0]).backward()
    opt.step()
    opt.zero_grad()


def _two_cells(run_root):
    """Cell 1: steps 1-100, ``tm.checkpoint()`` at 80, stopped at 100. Cell 2: loads step 80's and trains 81-200."""
    model, opt = _setup()
    with tm.monitor(name="first", run_dir=run_root, budget_steps=200) as first:
        for step in range(1, 1001):
            _step(model, opt, step)
            if step == 79:
                tm.checkpoint()  # lands at the next step boundary: step 80
            if step == 99:
                tm.stop()  # likewise: after step 100
    model, opt = _setup(seed=1)
    with tm.monitor(name="second", run_dir=run_root, budget_steps=200, resume="last") as second:
        saved = torch.load(first.run_dir / "checkpoints" / "step-80.pt", weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(81, 201):
            _step(model, opt, step)
    return first, second


def _logged_steps(run_dir, name: str) -> list[int]:
    return [s for e in iter_events(run_dir / LOG_FILE) if e.get("name") == name and e["kind"] in ("series", "steps")
            for s in e["step"]]


def test_a_resumed_runs_points_are_recorded_at_steps_of_the_training(run_root):
    first, second = _two_cells(run_root)
    passport = json.loads((second.run_dir / "passport.json").read_text())
    assert passport["steps"] == 120 and passport["lineage"]["resumed_from"]["step"] == 80
    assert _logged_steps(first.run_dir, "train_loss") == list(range(1, 101))
    assert _logged_steps(second.run_dir, "train_loss") == list(range(81, 201))
    assert _logged_steps(second.run_dir, "tokens_per_step") == list(range(81, 201))
    assert passport["series"]["train_loss"]["last_step"] == 200 and passport["series"]["train_loss"]["count"] == 120
    curves = json.loads((second.run_dir / "curves.json").read_text())
    assert curves["series"]["train_loss"]["step"] == list(range(81, 201))
    assert curves["reports"]["step"][-1] == 200  # report rows on the same axis as the points
    views = second.context.series_views  # what the live widget sent: the parent's curve once, up to step 80
    with views.lock:
        xs, _ = views.decimators["train_loss.parent"].columns(include_open=True)
    assert list(xs) == list(range(1, 81)) and "train_loss.parent" not in passport["series"]  # drawn, not recorded


def test_the_display_of_a_resumed_run_draws_the_whole_training_on_one_axis(run_root):
    first, second = _two_cells(run_root)
    state, columns, _ = display_module.replay(second.run_dir)
    by_name = {c.name: c for c in columns}
    assert list(by_name["train_loss"].xs) == [float(s) for s in range(81, 201)]
    parent = by_name["train_loss.parent"]  # the parent's curve up to the step resumed from
    assert list(parent.xs) == [float(s) for s in range(1, 81)]
    first_losses = [v for e in iter_events(first.run_dir / LOG_FILE) if e.get("name") == "train_loss"
                    for v in e["value"]][:80]
    assert list(parent.ys) == first_losses
    loss_chart = next(c for c in state["charts"] if c["id"] == "loss")
    assert "train_loss.parent" in loss_chart["series"]
    tokens = by_name["train_loss"].mapped["tokens"]  # the tokens axis: this run's own, from the step resumed at
    assert tokens[0] == 4 * 6 and tokens[-1] == 120 * 4 * 6
