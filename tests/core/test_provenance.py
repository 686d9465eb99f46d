"""The one provenance rule: a derived number is as good as its weakest input; labels read back are checked."""

from __future__ import annotations

import math

from trainmeter.core.provenance import (
    Derivation,
    Input,
    as_input,
    as_provenance,
    derived_provenance,
    finite_number,
    weakest,
)


def _d(*provenances: str) -> Derivation:
    inputs = tuple(Input(name=f"x{i}", value=1.0, unit="1", provenance=p)  # type: ignore[arg-type]
                   for i, p in enumerate(provenances))
    return Derivation(name="d", formula="x0", value=1.0, unit="1", inputs=inputs)


def test_a_derived_number_takes_the_weakest_provenance_of_its_inputs():
    assert weakest(["counted", "measured", "detected"]) == "detected"
    assert derived_provenance(_d("counted", "declared", "measured")) == "declared"
    assert derived_provenance(_d("counted", "assumed")) == "assumed"
    assert derived_provenance(_d()) == "detected" and derived_provenance(_d(), "measured") == "measured"


def test_a_label_read_back_is_kept_only_when_it_is_one_of_the_five():
    assert as_provenance("declared") == "declared"
    assert as_provenance(None) == "detected" and as_provenance("guessed", "assumed") == "assumed"


def test_a_derivation_used_as_an_input_carries_its_weakest_provenance_and_formula():
    inp = as_input("F", _d("counted", "declared"), "FLOP/token", "counted")
    assert inp.provenance == "declared" and inp.source == "d = x0" and inp.value == 1.0
    plain = as_input("n", 3, "1", "detected", "world size")
    assert (plain.value, plain.provenance, plain.source) == (3, "detected", "world size")


def test_only_finite_numbers_count_as_numbers():
    assert finite_number(2) == 2.0 and finite_number(True) is None and finite_number("1") is None
    assert finite_number(math.nan) is None and finite_number(math.inf) is None


def test_to_dict_is_what_dataclasses_asdict_gives_field_for_field():
    from dataclasses import asdict

    from trainmeter.core.provenance import Derivation, Input

    d = Derivation(name="mfu", formula="F * S / (t * P)", value=0.41, unit="fraction",
                   inputs=(Input(name="F", value=6.0e9, unit="FLOP/token", provenance="counted", source="meta pass"),
                           Input(name="P", value=None, unit="FLOP/s", provenance="assumed")),
                   missing=None)
    assert d.to_dict() == asdict(d) and list(d.to_dict()) == list(asdict(d))
    assert type(d.to_dict()["inputs"]) is tuple and list(d.to_dict()["inputs"][0]) == list(asdict(d)["inputs"][0])
    empty = Derivation(name="x", formula="a", value=None, unit="1", missing="--peak-tflops X")
    assert empty.to_dict() == asdict(empty)
