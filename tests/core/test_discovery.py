"""Discovery: helpers that never raise on odd objects, and the root chosen as the outermost module called."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from trainmeter.core.discovery import _instance, _is_compiled, _is_lightning_module, _torch_class  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


class _Refuses:
    @property
    def __class__(self):  # a proxy whose class lookup fails
        raise RuntimeError("no")


def test_isinstance_on_an_object_that_refuses_is_no_match():
    assert _instance(_Refuses(), nn.Module) is False
    assert _instance(nn.Linear(1, 1), nn.Module) is True


def test_torch_building_blocks_are_told_from_user_models_and_compiled_wrappers():
    class Net(nn.Module):
        pass

    assert _torch_class(nn.Linear) and _torch_class(nn.Sequential)
    assert not _torch_class(Net)
    assert not _is_compiled(nn.Linear(1, 1)) and not _is_lightning_module(nn.Linear(1, 1))


def test_the_root_is_the_outermost_module_called_that_holds_the_parameters(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))

        def forward(self, x):
            return self.body(x)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    finally:
        m.finish("completed")
    assert m.probes.discovery.root_name == "Net" and m.model_ref() is model
    assert m.params["trained"] == sum(p.numel() for p in model.parameters())


class _Plain:
    def __init__(self):
        self.lr = 0.5
        self.groups = [1, 2]


def _has_dict_object(obj, name):
    """Whether ``obj``'s attributes (``name`` among them) live in a dict object: CPython 3.11+ keeps them in
    shared-keys values until ``__dict__`` is asked for."""
    import gc

    return any(type(ref) is dict and name in ref for ref in gc.get_referents(obj))


def test_an_instances_attributes_are_read_without_turning_them_into_a_dict():
    from trainmeter.core.reachable import _attribute_values

    plain = _Plain()
    assert _attribute_values(plain) == [0.5, [1, 2]]
    if sys.version_info >= (3, 11):
        assert not _has_dict_object(plain, "lr")  # the user's later loads of plain.lr stay specialized


def test_an_instance_whose_dict_was_made_and_a_slotted_one_are_read_too():
    from trainmeter.core.reachable import _attribute_values

    plain = _Plain()
    vars(plain)  # the user's code made it
    assert _attribute_values(plain) == [0.5, [1, 2]]

    class Slotted:
        __slots__ = ("a",)

    assert _attribute_values(Slotted()) == []
    assert _attribute_values(_Refuses()) == []


def test_a_container_subclass_gives_its_attributes_not_its_items():
    from trainmeter.core.reachable import _attribute_values

    class Batch(dict):
        pass

    batch = Batch((i, i) for i in range(100_000))
    batch.model = "m"
    assert _attribute_values(batch) == ["m"]


def test_reading_an_instances_attributes_runs_no_code_of_its_class_or_metaclass():
    from trainmeter.core.reachable import _attribute_values

    looked_up = []

    class Meta(type):
        def __getattribute__(cls, name):
            looked_up.append(name)
            return super().__getattribute__(name)

    class Watched(metaclass=Meta):
        def __init__(self):
            self.model = "m"

        def __getattribute__(self, name):
            looked_up.append(name)
            return object.__getattribute__(self, name)

    watched = Watched()
    looked_up.clear()
    assert _attribute_values(watched) == ["m"]
    assert looked_up == []


def test_the_start_finds_an_optimizer_held_by_an_attribute_and_leaves_its_attributes_as_they_were(tmp_path):
    model = nn.Linear(4, 1)
    holder = _Plain()
    holder.opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built in an earlier cell
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            holder.opt.step()
    finally:
        m.finish("completed")
    assert m.model_ref() is model and m.steps_state.steps == 3
    if sys.version_info >= (3, 11):
        assert not _has_dict_object(holder, "opt") and not _has_dict_object(holder.opt, "param_groups")


class _Policy(nn.Module):
    """Trained through ``evaluate`` (as stable-baselines3 trains its policy), never called itself for training."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.head = nn.Linear(64, 1)

    def forward(self, x):  # acting only, under no_grad
        return self.head(self.trunk(x))

    def evaluate(self, x):
        return self.head(self.trunk(x)).pow(2).mean()


def _passport(m):
    return json.loads((Path(m.run_dir) / "passport.json").read_text())


def test_a_model_trained_through_a_method_is_the_model_its_batches_read_from_its_largest_called_part(tmp_path):
    import trainmeter as tm

    torch.manual_seed(0)
    policy = _Policy()
    with tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
        for _ in range(4):
            with torch.no_grad():
                policy(torch.ones(16, 4))  # a rollout: no batch of training
            policy.evaluate(torch.ones(8, 4)).backward()
            opt.step()
    p = _passport(m)
    total = sum(q.numel() for q in policy.parameters())
    assert [lane["model"] for lane in p["lanes"]] == ["_Policy"]  # not its head, Linear(64, 1): 65 of 4,545
    assert p["params"]["trained"] == p["params"]["root_total"] == total
    assert m.tokens == 4 * 8 and m.token_unit == "samples"  # every batch, from step 1
    assert p["series_info"]["tokens_per_step"]["source"].startswith("batches of Sequential inside _Policy")
    assert p["compute"]["counted_flops_per_token"] is None  # no pass of the head's, nor of the policy's own call
    assert "_Policy is trained without being called itself" in p["compute"]["counted_missing"]


def test_a_module_holding_a_small_part_of_the_trained_parameters_is_never_the_model(tmp_path):
    import trainmeter as tm

    trunk, head = nn.Sequential(nn.Linear(4, 64)), nn.Linear(64, 1)
    with tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        opt = torch.optim.SGD([*trunk.parameters(), *head.parameters()], lr=0.1)
        for _ in range(3):
            with torch.no_grad():
                features = trunk(torch.ones(8, 4))
            head(features).sum().backward()  # only the head is called with gradients: 65 of 385 parameters
            opt.step()
    assert m.probes.discovery.root_name == "Sequential" and m.steps == 3  # the trunk holds most of them


def test_muon_and_adamw_on_one_model_give_one_trained_figure_in_the_passport(tmp_path):
    import trainmeter as tm

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    matrices = [q for q in model.parameters() if q.ndim == 2]
    others = [q for q in model.parameters() if q.ndim != 2]
    muon = getattr(torch.optim, "Muon", torch.optim.SGD)  # the usual recipe: Muon on matrices, AdamW on the rest
    with tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        first, second = muon(matrices, lr=0.02), torch.optim.AdamW(others, lr=1e-3)
        for _ in range(3):
            model(torch.ones(4, 16)).pow(2).mean().backward()
            first.step()
            second.step()
    p = _passport(m)
    total = sum(q.numel() for q in model.parameters())
    assert sum(q.numel() for q in matrices) < total
    assert p["params"]["trained"] == p["compute"]["parameters"]["trained"] == total
    lines = [line for line in (Path(m.run_dir) / "passport.md").read_text().splitlines() if "arameters" in line]
    assert lines == ["- Trained parameters: 577", "- Parameters: 577 total; 577 trained; 0 frozen"]


def test_with_no_model_the_trained_figure_is_every_parameter_the_optimizers_train(tmp_path):
    import trainmeter as tm

    weight, bias = torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)  # held by no module
    with tm.monitor(run_dir=tmp_path, interval_s=3600) as m:
        first, second = torch.optim.SGD([weight], lr=0.1), torch.optim.SGD([bias], lr=0.1)
        for _ in range(2):
            (weight.sum() + bias.sum()).backward()
            first.step()
            second.step()
    assert m.probes.discovery.root_name is None and _passport(m)["params"]["trained"] == 5
