"""A training across two runs (docs/spec.md section 22): the second resumes the first through ``--resume``."""

from __future__ import annotations

import json

import pytest
import torch

import trainmeter as tm


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 50))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _step(model, opt, step: int) -> float:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, 50, (4, 6), generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), x[:, 0])
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def _first_run(run_root):
    """Steps 1-100, ``tm.checkpoint()`` taken at step 80, stopped after step 100 (``tm.stop()``)."""
    model, opt = _setup()
    with tm.monitor(name="first", run_dir=run_root, budget_steps=200) as m:
        for i in range(1000):
            _step(model, opt, i + 1)
            if i == 78:
                tm.checkpoint()
            if i == 98:
                tm.stop()
    return m


def _passport(m) -> dict:
    return json.loads((m.run_dir / "passport.json").read_text())


def test_a_resumed_run_reads_its_parent_step_from_the_checkpoint_it_loads_and_counts_on_over_the_training(run_root):
    first = _first_run(run_root)
    p1 = _passport(first)
    assert p1["status"] == "stopped" and p1["steps"] == 100 and p1["checkpoints"][0]["step"] == 80
    model, opt = _setup(seed=1)
    with tm.monitor(name="second", run_dir=run_root, budget_steps=200, resume="last") as m:
        saved = torch.load(first.run_dir / "checkpoints" / "step-80.pt", weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        for step in range(81, 201):
            _step(model, opt, step)
    assert not hasattr(torch.load, "__trainmeter_original__")  # torch.load put back at the run's end
    p = _passport(m)
    assert "lineage" not in p1 and p1["options"]["resume"] is None
    lineage = p["lineage"]
    assert lineage["parent"] == f"../{first.run_dir.name}" and p["options"]["resume"] == lineage["parent"]
    assert lineage["resumed_from"] == {"step": 80, "parent_step": 80, "provenance": "detected",
                                       "source": "torch.load of the parent's checkpoint (trainmeter record)",
                                       "checkpoint": "checkpoints/step-80.pt", "framework": None,
                                       "framework_step": None}
    assert [(r["path"], r["name"], r["steps"]) for r in lineage["runs"]] == [
        (f"../{first.run_dir.name}", "first", 100), (".", "second", 120)]
    assert lineage["lost_work"]["steps"] == 20 and lineage["lost_work"]["tokens"] == 20 * 4 * 6
    training = lineage["training"]
    assert p["steps"] == 120 and training["steps"] == 200
    assert training["tokens"] == 200 * 4 * 6 and training["token_unit"] == "tokens"
    assert lineage["restart_s"] is not None and lineage["restart_s"] >= 0
    assert p["compute"]["progress"] == pytest.approx(1.0)
    assert str(run_root) not in json.dumps([lineage, p["options"]])  # no absolute path
    assert str(run_root) not in (m.run_dir / "events.jsonl").read_text()
    md = (m.run_dir / "passport.md").read_text()
    assert "- Lineage: first → second" in md and "Resumed from step 80 (detected" in md
    assert "lost work 20 steps" in md

    with tm.monitor(name="third", run_dir=run_root, resume=m.run_dir) as third:  # a path; nothing listed to load
        for step in range(201, 211):
            _step(model, opt, step)
    lineage = _passport(third)["lineage"]
    assert [(r["path"], r["resumed_from_step"], r["lost_steps"]) for r in lineage["runs"]] == [
        (f"../{first.run_dir.name}", None, 20), (f"../{m.run_dir.name}", 80, 0), (".", 200, None)]
    assert lineage["resumed_from"]["provenance"] == "assumed" and "in memory" in lineage["resumed_from"]["source"]
    assert lineage["training"]["steps"] == 210 and lineage["training"]["lost_steps"] == 20
    assert lineage["training"]["tokens"] == 210 * 4 * 6


def test_a_resumed_run_that_loads_nothing_assumes_the_parents_last_checkpoint_and_says_why(run_root):
    _first_run(run_root)
    model, opt = _setup()
    with tm.monitor(name="second", run_dir=run_root, budget_steps=200, resume="first") as m:
        for step in range(81, 91):
            _step(model, opt, step)
    resumed = _passport(m)["lineage"]["resumed_from"]
    assert resumed["step"] == 80 and resumed["provenance"] == "assumed"
    assert "no checkpoint it listed was loaded" in resumed["source"]
    assert _passport(m)["compute"]["progress"] == pytest.approx(90 / 200)


@pytest.mark.parametrize("value", ["nothing-here", "", 3, "/no/such/run", "x" * 5000, True])
def test_resume_naming_no_saved_run_is_refused_before_the_run_starts_naming_the_value(run_root, value):
    with pytest.raises(ValueError, match="for --resume: .*expected last, the name of a saved run"):
        tm.monitor(run_dir=run_root, resume=value)
    assert not any(run_root.iterdir()) if run_root.exists() else True


def test_the_resume_flag_alone_means_last_and_a_bad_one_is_a_usage_error(run_root):
    from IPython.core.error import UsageError

    from trainmeter.magic import parse_flags

    first = _first_run(run_root)
    assert parse_flags(f"--dir {run_root} --resume").resume == first.run_dir.resolve()
    assert parse_flags(f"--dir {run_root} --resume first --name again").resume == first.run_dir.resolve()
    with pytest.raises(UsageError, match="invalid value 'second' for --resume"):
        parse_flags(f"--dir {run_root} --resume second")


def test_loading_a_file_the_parents_own_torch_save_wrote_is_the_step_resumed_from(run_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, opt = _setup()
    with tm.monitor(name="saver", run_dir=run_root):
        for step in range(1, 11):
            _step(model, opt, step)
            if step == 6:
                torch.save(model.state_dict(), "mine.pt")  # the loop's own saver: a checkpoint record
    with tm.monitor(name="again", run_dir=run_root, resume="saver") as m:
        model.load_state_dict(torch.load("mine.pt", weights_only=True))
        _step(model, opt, 7)
    lineage = _passport(m)["lineage"]
    assert lineage["resumed_from"]["step"] == 6 and lineage["resumed_from"]["provenance"] == "detected"
    assert lineage["resumed_from"]["checkpoint"] == "mine.pt" and lineage["lost_work"]["steps"] == 4
