"""The one ETA rule: the recent pace when the run has one, else the training-only pace, said in the derivation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainmeter.compute.card import progress_bar
from trainmeter.compute.eta import REPORT_WINDOW, Pace, eta, eta_s, pace_of, recent_pace
from trainmeter.compute.mfu import budget_tokens, progress

TRAINING = Pace(name="training-only", per_s=100_000.0, window=REPORT_WINDOW)


def test_eta_is_the_budget_left_over_the_named_pace() -> None:
    training = eta_s(5e9, 20e9, TRAINING)
    assert training.value == 150_000.0 and training.unit == "s" and training.name == "eta_s"
    assert training.inputs[3].value == "training-only" and REPORT_WINDOW in training.inputs[3].source
    session = eta_s(5e9, budget_tokens(tokens=20e9), Pace(name="session", per_s=50_000.0, window="wall clock"))
    assert session.name == "eta_s.session" and session.value == 300_000.0
    assert session.inputs[3].value == "session"
    assert eta_s(25e9, 20e9, Pace(name="training-only", per_s=1.0, window="w")).value == 0.0
    assert "not measured" in eta_s(0, 20e9, Pace(name="training-only", per_s=None, window="w")).missing


def test_the_recent_pace_wins_when_the_run_has_one_and_says_over_which_window() -> None:
    recent = recent_pace(SimpleNamespace(tokens_per_s=50_000.0, steps_per_s=2.0, window_s=10.0))
    d = eta(5e9, 20e9, recent=recent, training=TRAINING)
    assert d.value == 300_000.0 and pace_of(d) == "recent"
    assert "last 10 s of steps, wall clock" in d.inputs[3].source
    steps = eta(10, 30, recent=recent_pace(SimpleNamespace(tokens_per_s=1.0, steps_per_s=2.0, window_s=10.0),
                                           "steps"), training=TRAINING, unit="steps")
    assert steps.value == 10.0 and [i.name for i in steps.inputs][:3] == ["steps", "budget_steps", "steps_per_s"]


def test_without_a_recent_rate_the_training_only_pace_is_used() -> None:
    assert pace_of(eta(5e9, 20e9, recent=None, training=TRAINING)) == "training-only"
    stalled = Pace(name="recent", per_s=0.0, window="w")
    assert pace_of(eta(5e9, 20e9, recent=stalled, training=TRAINING)) == "training-only"
    assert pace_of(eta(5e9, 20e9, recent=recent_pace(None), training=TRAINING)) == "training-only"


def test_the_progress_bar_shows_the_eta_and_the_pace_of_the_eta_derivation() -> None:
    budget = budget_tokens(tokens=20e9)
    recent = Pace(name="recent", per_s=50_000.0, window="the last 10 s")
    derivations = {"progress": progress(5e9, budget).to_dict(),
                   "eta_s": eta(5e9, budget, recent=recent, training=TRAINING).to_dict()}
    bar = progress_bar({}, derivations)
    assert bar is not None and bar["pace"] == "recent" and bar["eta_s"] == pytest.approx(300_000.0)
    with pytest.raises(ValueError, match="unknown pace"):
        eta_s(0, 1, Pace(name="walltime", per_s=1.0, window="w"))  # type: ignore[arg-type]
