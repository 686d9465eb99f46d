"""ComputeView: the compute figures other wings read, by convention."""

from __future__ import annotations

from trainmeter.compute.view import ComputeView
from trainmeter.core.provenance import Derivation


def _d(name: str, value: float | None, missing: str | None = None) -> Derivation:
    return Derivation(name=name, formula="", value=value, unit="fraction", missing=missing)


DERIVED = {"mfu[hf]": _d("mfu[hf]", 0.4), "mfu[counted]": _d("mfu[counted]", 0.38),
           "mfu.session[hf]": _d("mfu.session[hf]", 0.3), "flops_spent[hf]": _d("flops_spent[hf]", 2e15)}


def test_mfu_and_flops_spent_default_to_the_chosen_convention():
    view = ComputeView(convention="hf", derived=DERIVED)
    assert view.mfu().value == 0.4 and view.mfu("counted").value == 0.38
    assert view.flops_spent().value == 2e15


def test_without_a_convention_nothing_is_picked_silently():
    view = ComputeView(derived=DERIVED)
    assert view.mfu() is None and view.flops_spent() is None


def test_mfu_by_convention_lists_every_training_only_mfu_and_not_the_session_one():
    assert ComputeView(derived=DERIVED).mfu_by_convention() == {"hf": 0.4, "counted": 0.38}
