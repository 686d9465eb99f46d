"""The wiring: the default wings, in the order their requirements give."""

from __future__ import annotations

import random

from trainmeter.core.extension import order_extensions
from trainmeter.extensions import WING_NAMES, default_extensions
from trainmeter.options import make_options


def _names(exts) -> list[str]:
    return [e.name for e in exts]


def test_the_default_wings_come_in_the_order_their_requirements_give():
    names = _names(default_extensions(make_options()))
    assert names == ["overhead", "compute", "gpu", "energy", "time", "node", "taps", "frameworks", "distributed",
                     "optim", "curves", "alerts", "verdicts"]
    assert set(names) == set(WING_NAMES)


def test_the_stated_requirements_hold_whatever_order_the_wings_are_listed_in():
    exts = default_extensions(make_options())
    for seed in range(20):
        shuffled = list(exts)
        random.Random(seed).shuffle(shuffled)
        names = _names(order_extensions(shuffled, known=WING_NAMES))
        assert names[0] == "overhead" and names[-1] == "verdicts"  # at stop the others' threads still run; last
        for reader, source in (("gpu", "compute"), ("energy", "gpu"), ("energy", "compute"),
                               ("distributed", "compute"), ("distributed", "gpu"), ("curves", "compute")):
            assert names.index(source) < names.index(reader), (seed, reader, source)


def test_a_rank_without_the_node_samplers_still_orders_its_wings(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    names = _names(default_extensions(make_options()))
    assert "gpu" not in names and "node" not in names
    assert names.index("compute") < names.index("energy") and names[-1] == "verdicts"
