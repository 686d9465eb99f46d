"""State patches: the diff the publisher sends and the front end applies (js/tests/statestore.test.ts does the TS side)."""

from __future__ import annotations

import json

from tests.fixtures.make_state_v2 import FIXTURE
from tests.widget.wire_types import apply
from trainmeter.widget.publisher import Revisions, diff


def _golden() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_a_tile_whose_value_changed_costs_its_path_and_number():
    old = _golden()
    new = json.loads(json.dumps(old))
    new["tiles"][0]["value"] += 1
    new["elapsed_s"] = 99.0
    ops = diff(old, new)
    assert ops == [[["elapsed_s"], 99.0], [["tiles", 0, "value"], new["tiles"][0]["value"]]]
    assert apply(old, ops) == new and old == _golden()  # the old state is not touched
    assert len(json.dumps(ops)) < len(json.dumps(new)) / 50


def test_deleted_keys_new_keys_and_lists_of_another_length():
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1, 2], "d": True}
    new = {"a": 1, "b": {"x": 1}, "c": [1, 2, 3], "d": 1, "e": None}
    ops = diff(old, new)
    assert ops == [[["b", "y"]], [["c"], [1, 2, 3]], [["d"], 1], [["e"], None]]  # True == 1, not in JSON
    assert apply(old, ops) == new


def test_a_dict_whose_keys_changed_order_is_set_whole_and_the_root_can_be_replaced():
    old = {"phases_s": {"train": 1.0, "eval": 2.0}}
    new = {"phases_s": {"eval": 2.0, "train": 1.0, "data_wait": 0.5}}
    assert diff(old, new) == [[["phases_s"], new["phases_s"]]]  # the front end keeps the order it is sent
    assert diff(old, old) == [] and diff(1, {"a": 1}) == [[[], {"a": 1}]]
    assert apply(old, [[[], new]]) == new


def test_revisions_number_each_changed_state_from_the_start():
    revs = Revisions({"name": "r", "status": "starting", "rev": 0})
    assert revs.note({"name": "r", "status": "running", "rev": 0}) == [[["status"], "running"]]
    assert revs.rev == 1 and revs.full == {"name": "r", "status": "running", "rev": 1}
    assert revs.note({"name": "r", "status": "running", "rev": 0}) == [] and revs.rev == 1
