"""Discovery: helpers that never raise on odd objects, and the root chosen as the outermost module called."""

from __future__ import annotations

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
