"""The typed wire: the golden state is what the publisher builds, and every state and message fits the TypedDicts."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from tests.fakes.gpu.fake import sampler_step
from tests.widget import wire_types as protocol
from tests.widget.wire_types import decode_frame
from trainmeter.core.clock import FakeClock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def conformance_errors(value: Any, typ: Any, path: str = "state") -> list[str]:
    """Where ``value`` (decoded JSON) differs from ``typ``: missing or unknown keys, wrong types."""
    if typ is Any:
        return []
    if is_typeddict(typ):
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object ({typ.__name__})"]
        hints = get_type_hints(typ)
        errors = [f"{path}.{k}: missing" for k in sorted(typ.__required_keys__) if k not in value]
        errors += [f"{path}.{k}: not a key of {typ.__name__}" for k in value if k not in hints]
        for key, item in value.items():
            if key in hints:
                errors += conformance_errors(item, hints[key], f"{path}.{key}")
        return errors
    origin = get_origin(typ)
    if origin is Literal:
        return [] if value in get_args(typ) else [f"{path}: {value!r} not one of {get_args(typ)}"]
    if origin in (Union, types.UnionType):
        fits = [conformance_errors(value, arg, path) for arg in get_args(typ)]
        return [] if any(not f for f in fits) else [f"{path}: {value!r} fits none of {typ}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not a list"]
        (item_type,) = get_args(typ)
        return [e for i, item in enumerate(value) for e in conformance_errors(item, item_type, f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object"]
        _, item_type = get_args(typ)
        return [e for k, item in value.items() for e in conformance_errors(item, item_type, f"{path}[{k!r}]")]
    if typ is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if typ is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, typ)
    return [] if ok else [f"{path}: {value!r} is not {typ.__name__}"]


def _golden() -> dict[str, Any]:
    return json.loads((FIXTURES / "state_v2.json").read_text(encoding="utf-8"))


def test_the_golden_state_is_what_the_publisher_builds_from_its_run():
    from tests.fixtures.make_state_v2 import golden_state

    assert golden_state() == _golden()  # a deliberate change: run tests/fixtures/make_state_v2.py


def test_the_golden_state_has_every_key_of_the_typed_state_and_fits_it():
    golden = _golden()
    assert conformance_errors(golden, protocol.State) == []
    assert set(golden) == set(get_type_hints(protocol.State))  # the fixture shows every key the publisher sends
    loss = next(c for c in golden["charts"] if c["id"] == "loss")
    assert loss["smoothed"] == {"train_loss": "train_loss.ema"} and golden["markers"][0]["chart"] == "loss"
    assert golden["look"]["palette"][:2] == ["#4e79a7", "#f28e2b"] and golden["progress"]["pace"] == "recent"


def test_the_checker_names_a_wrong_type_a_missing_key_and_an_unknown_one():
    bad = {**_golden(), "status": "paused", "extra": 1}
    bad["tiles"] = [{"id": "step", "label": "step", "value": "12", "unit": "count"}, {"id": "x"}]
    errors = conformance_errors(bad, protocol.State)
    assert "state.status: 'paused' not one of" in " ".join(errors) and "state.extra: not a key of State" in errors
    assert "state.tiles[1].label: missing" in errors and any(e.startswith("state.tiles[0].value") for e in errors)


def test_finished_replayed_and_extension_states_fit_the_typed_state(run_root):
    from tests.widget.test_show import _saved_run
    from trainmeter.widget.show import replay
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    m = _saved_run(run_root)
    finished = build_state(facts_from_monitor(m.context))
    replayed, _, _ = replay(m.run_dir)
    for state in (finished, replayed):
        assert conformance_errors(json.loads(json.dumps(state)), protocol.State) == []


def test_every_message_the_publisher_sends_fits_a_kernel_message(run_root):
    from tests.widget.test_publisher import Recorder, _monitor, _train
    from trainmeter.widget.publisher import Publisher

    clock = FakeClock(0.0)
    sent: list[dict[str, Any]] = []

    class _Logged(Recorder):
        def send(self, content, buffers=None):
            sent.append(json.loads(json.dumps(content)))
            if buffers:
                assert decode_frame(buffers[0]).seq == content["seq"]

    m = _monitor(run_root, clock, interval_s=1.0)
    pub = Publisher(m.context, _Logged(clock), clock=clock)
    _train(m, clock, pub, seconds=3, steps_per_s=40, hello_every_tick=True)
    _train(m, clock, pub, seconds=2, steps_per_s=40)
    for _ in range(2):  # a state patch alone: no new points since the last tick (the first sends the last ones)
        clock.advance(0.5)
        pub.tick()
    assert {c["kind"] for c in sent} == {"append", "snapshot", "state"}
    assert any("state" in c for c in sent if c["kind"] == "append")
    assert all(conformance_errors(c, protocol.KernelMessage, "message") == [] for c in sent)
    assert conformance_errors({"kind": "hello"}, protocol.FrontMessage, "message") == []


@pytest.mark.parametrize("typ", [protocol.State, protocol.Tile, protocol.Chart, protocol.Panel, protocol.Look])
def test_every_typed_dict_is_documented(typ):
    assert typ.__doc__ and "\n" not in typ.__doc__.strip().splitlines()[0]


def test_the_wings_tiles_panels_and_charts_fit_the_typed_state(run_root):
    from tests.energy.test_extension import StubGpu
    from trainmeter.compute.extension import ComputeExtension
    from trainmeter.energy.extension import EnergyExtension
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options
    from trainmeter.timesplit.extension import TimeSplit
    from trainmeter.verdicts.extension import Verdicts
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["h100_sxm"])
    energy = EnergyExtension(powercap_root=run_root / "none")
    m = make_monitor(make_options(run_dir=run_root, name="wings", interval_s=1.0, budget_tokens=10**5), clock=clock,
                     text=False, probes=False, extensions=[gpu, energy, TimeSplit(), ComputeExtension(), Verdicts()])
    m.start()
    for i in range(120):
        clock.advance(0.25)
        sampler_step(gpu.sampler, clock())
        m.on_step(64, loss_value=(50.0 if 80 <= i < 83 else 2.0 + 0.001 * (i % 5)))
    live = json.loads(json.dumps(build_state(facts_from_monitor(m.context))))
    m.finish("completed")
    finished = json.loads(json.dumps(build_state(facts_from_monitor(m.context))))
    assert {"energy", "mfu"} <= {t["id"] for t in finished["tiles"]} and live["markers"]
    for state in (live, finished):
        assert conformance_errors(state, protocol.State) == []
