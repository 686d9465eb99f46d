"""Discovery: helpers that never raise on odd objects, and the root chosen as the outermost module called."""

from __future__ import annotations

import sys

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
    assert m.probes.root_name == "Net" and m.model_ref() is model
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
