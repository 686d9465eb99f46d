"""The extension contract: the order computed from requires/precedes, and the Protocol the wings conform to."""

from __future__ import annotations

import pytest

from tests.core.contract_events import EVENTS
from trainmeter.core.extension import Extension, ExtensionBase, RequirementError, order_extensions


def _ext(name: str, requires: tuple[str, ...] = (), precedes: tuple[str, ...] = ()) -> ExtensionBase:
    ext = ExtensionBase()
    ext.name, ext.requires, ext.precedes = name, requires, precedes  # type: ignore[misc]
    return ext


def _names(exts) -> list[str]:
    return [e.name for e in exts]


def test_a_required_wing_comes_before_the_wing_that_reads_it():
    exts = [_ext("energy", requires=("gpu",)), _ext("gpu", requires=("compute",)), _ext("compute")]
    assert _names(order_extensions(exts)) == ["compute", "gpu", "energy"]


def test_the_order_is_stable_where_nothing_is_required():
    exts = [_ext(n) for n in ("b", "a", "d", "c")]
    assert _names(order_extensions(exts)) == ["b", "a", "d", "c"]


def test_a_star_requirement_puts_a_wing_after_every_other_and_a_star_precedes_before_every_other():
    exts = [_ext("verdicts", requires=("*",)), _ext("gpu"), _ext("overhead", precedes=("*",)), _ext("node")]
    assert _names(order_extensions(exts)) == ["overhead", "gpu", "node", "verdicts"]


def test_a_cycle_is_an_error_that_names_the_wings_on_it():
    exts = [_ext("a", requires=("b",)), _ext("b", requires=("a",)), _ext("c")]
    with pytest.raises(RequirementError, match="a, b form a cycle"):
        order_extensions(exts)


def test_an_unknown_requirement_is_an_error_and_a_known_absent_one_is_not():
    with pytest.raises(RequirementError, match="'enrgy', which is no known wing"):
        order_extensions([_ext("verdicts", requires=("enrgy",))], known=("energy", "verdicts"))
    assert _names(order_extensions([_ext("energy", requires=("gpu",))], known=("gpu", "energy"))) == ["energy"]


def test_the_no_op_base_conforms_to_the_protocol_and_its_events_do_nothing():
    base = ExtensionBase()
    assert isinstance(base, Extension)
    assert base.on_step is None and base.on_report(None) is None and base.passport_section() is None  # type: ignore
    assert base.tiles() == base.panels() == base.charts() == base.markers() == base.warnings() == []


def test_the_event_table_names_every_member_of_the_protocol_once():
    members = set(Extension.__annotations__) | {
        n for n, v in vars(Extension).items() if callable(v) and not n.startswith("_")}
    names = [e.name for e in EVENTS]
    assert len(names) == len(set(names))
    assert set(names) == members


def test_the_contract_doc_shows_the_event_table_generated_from_the_protocol():
    from pathlib import Path

    from tests.core.contract_events import events_table

    doc = (Path(__file__).parents[2] / "docs" / "contracts" / "EXTENSIONS.md").read_text(encoding="utf-8")
    shown = doc.split("<!-- events: generated -->\n", 1)[1].split("\n<!-- /events -->", 1)[0]
    assert shown == events_table(), "regenerate the table: see docs/contracts/EXTENSIONS.md"
    rows = {line.split("`")[1].split("(")[0].split(":")[0] for line in shown.splitlines()[2:]}
    assert rows == {e.name for e in EVENTS}
