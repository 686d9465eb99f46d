"""Reads of a framework's objects: step counts, batch rows, optimizer kind; never raising."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from trainmeter.frameworks import reads  # noqa: E402


def test_each_frameworks_own_step_count_is_read_and_a_missing_one_is_none():
    assert reads.framework_steps("hf", SimpleNamespace(state=SimpleNamespace(global_step=7))) == 7
    assert reads.framework_steps("keras", SimpleNamespace(optimizer=SimpleNamespace(iterations=3))) == 3
    assert reads.framework_steps("lightning", object()) is None
    assert reads.framework_steps("accelerate", object()) is None


def test_rows_of_an_array_batch_and_the_torch_optimizer_check():
    assert reads.rows(torch.zeros(5, 2)) == 5 and reads.rows(3) is None
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert reads.torch_optimizer(SimpleNamespace(opt=opt)) and not reads.torch_optimizer(object())
