"""Reads of a framework's objects: step counts, batch rows, optimizer kind and loss scale; never raising."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from trainmeter.integrations import frameworks as fastai  # noqa: E402
from trainmeter.integrations import hf, keras  # noqa: E402


def test_each_frameworks_own_step_count_is_read():
    assert hf.HfAdapter(None).own_steps(SimpleNamespace(state=SimpleNamespace(global_step=7))) == 7
    assert keras.KerasAdapter(None).own_steps(SimpleNamespace(optimizer=SimpleNamespace(iterations=3))) == 3
    assert fastai.FastaiAdapter(None).own_steps(SimpleNamespace(train_iter=4)) == 4


def test_rows_of_an_array_batch_the_torch_optimizer_check_and_the_loss_scale():
    assert keras.rows(torch.zeros(5, 2)) == 5 and keras.rows(3) is None
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert fastai.torch_optimizer(SimpleNamespace(opt=opt)) and not fastai.torch_optimizer(object())
    assert keras.loss_scale(SimpleNamespace(loss_scale_factor=None)) is None
    assert keras.loss_scale(SimpleNamespace(loss_scale_factor=8)) == 8.0
    assert keras.loss_scale(SimpleNamespace(inner_optimizer=1, built=False, initial_scale=2.0**15)) == 2.0**15
