"""Steps no torch.optim hook sees: ``tm.step()``, the stand-in stepper and "steps unknown" (docs/spec.md section 11)."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged  # noqa: E402
from trainmeter.core.explicit_steps import Stepper, steps_unknown  # noqa: E402
from trainmeter.core.faults import MonitorWarning  # noqa: E402


class PlainSGD:
    """An optimizer outside torch.optim (as fastai's or Keras' are): no torch hook sees its step."""

    def __init__(self, params):
        self.params = list(params)

    def step(self):
        with torch.no_grad():
            for p in self.params:
                p -= 0.1 * p.grad
                p.grad = None


def _train(model, opt, x, steps, explicit=None):
    losses = []
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if explicit is not None:
            explicit()
    return losses


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def test_tm_step_counts_steps_samples_and_the_loss_of_an_optimizer_outside_torch_optim(run_root):
    model = torch.nn.Linear(4, 1)
    x = torch.randn(8, 4)
    with tm.monitor(run_dir=run_root, interval_s=3600, model=model) as m:
        losses = _train(model, PlainSGD(model.parameters()), x, 3, explicit=tm.step)
    assert m.steps == 3 and m.tokens == 24 and m.token_unit == "samples"
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(losses)
    assert m.warnings == [] and _passport(m).get("steps_unknown") is None


def test_tm_step_with_the_model_finds_the_root_from_its_next_batch(run_root):
    model = torch.nn.Linear(4, 1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        _train(model, PlainSGD(model.parameters()), torch.randn(8, 4), 3, explicit=lambda: tm.step(model))
    assert m.steps == 3 and m.tokens == 16  # its first batch came before it was named


def test_backward_with_no_step_it_knows_warns_once_and_the_passport_says_steps_unknown(run_root):
    model = torch.nn.Linear(4, 1)
    with warnings.catch_warnings(record=True) as caught, tm.monitor(run_dir=run_root, interval_s=3600) as m:
        warnings.simplefilter("always")
        _train(model, PlainSGD(model.parameters()), torch.randn(8, 4), 3)
    ours = [w for w in caught if "no optimizer step trainmeter knows" in str(w.message)]
    assert len(ours) == 1 and "tm.step()" in str(ours[0].message)
    p = _passport(m)
    assert p["steps_unknown"] is True and p["goodput"] is None and steps_unknown(m)
    md = (m.run_dir / "passport.md").read_text()
    assert "Steps: unknown" in md and "Goodput" not in md
    assert "steps unknown" in m.record_sink.closing_line(m) and "after 0 steps" not in m.record_sink.closing_line(m)


def test_a_run_with_no_backward_and_no_step_is_not_steps_unknown(run_root):
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        torch.nn.Linear(4, 1)(torch.randn(2, 4))
    assert not steps_unknown(m) and _passport(m)["goodput"] is not None and m.warnings == []


def test_tm_step_outside_a_run_does_nothing():
    tm.step()  # no run: no error, nothing kept


def test_the_stepper_names_the_trained_parameters_only():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].weight.requires_grad_(False)
    stepper = Stepper("tm.step", [p for p in model.parameters() if p.requires_grad])
    assert sum(p.numel() for p in stepper.param_groups[0]["params"]) == 2 + 2 + 1


def test_tm_step_beside_a_torch_optimizer_is_ignored_with_one_warning(run_root):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(MonitorWarning, match=r"tm\.step\(\) ignored"), tm.monitor(run_dir=run_root, interval_s=3600) as m:
        losses = _train(model, opt, torch.randn(8, 4), 3, explicit=tm.step)
    assert m.steps == 3 and [v for _, v in logged(m, "train_loss")] == pytest.approx(losses)
    assert [w for w in m.warnings if w.startswith("tm.step() ignored")] and len(m.warnings) == 1


def test_a_framework_scaled_loss_is_recorded_divided_by_its_scale(tmp_path):
    from trainmeter.core.explicit_steps import scaled_loss

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = PlainSGD(model.parameters())
    x = torch.randn(8, 4)
    truth = []
    with tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        for _ in range(3):
            loss = model(x).pow(2).mean()
            out = loss * 1024.0  # as Keras' scale_loss does before backward
            scaled_loss(m, out, 1024.0, loss)
            out.backward()
            opt.step()
            tm.step(model)
            truth.append(loss.item())
    assert [v for _, v in logged(m, "train_loss")] == pytest.approx(truth, rel=1e-6)
