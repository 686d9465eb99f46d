"""--budget-samples: a budget in samples for a run that counts samples (docs/spec.md section 5)."""

import json

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402
from tests.conftest import tiny_model_and_data, train_steps  # noqa: E402


def _compute(m):
    """The passport's compute section and its derivations by name."""
    p = json.loads((m.run_dir / "passport.json").read_text())
    return p["compute"], {d["name"]: d for d in p["derivations"]}


def test_a_samples_budget_gives_progress_over_the_samples_the_run_counted(run_root):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tm.monitor(run_dir=run_root, budget_samples="160") as m:
        for _ in range(20):
            model(torch.randn(4, 3)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    c, d = _compute(m)
    assert m.token_unit == "samples" and c["progress"] == pytest.approx(0.5)
    assert d["budget_tokens"]["value"] == 160 and d["budget_tokens"]["inputs"][0]["source"] == "--budget-samples"
    from trainmeter.widget.view_model import build_state, facts_from_run

    run = tm.load(m.run_dir)
    assert build_state(facts_from_run(run.passport, run.events(), str(run.dir)))["progress"]["label"] == (
        "80 / 160 samples")


def test_a_samples_budget_on_a_run_that_counts_tokens_is_unknown_and_says_which_flag_fits(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, budget_samples=1000) as m:
        train_steps(model, opt, batches)
    c, d = _compute(m)
    assert c["progress"] is None and c["eta_s"] is None
    assert "this run counts tokens: give --budget-tokens" in d["progress"]["missing"]


@pytest.mark.parametrize("bad", [0, "-5", "lots"])
def test_a_bad_samples_budget_is_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match="--budget-samples"):
        tm.monitor(budget_samples=bad)


def test_two_budgets_are_refused():
    with pytest.raises(ValueError, match="at most one budget"):
        tm.monitor(budget_samples=10, budget_steps=5)
