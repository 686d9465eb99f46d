"""Shared fixtures: an injected clock, a run root, an IPython shell, a tiny model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmeter.core.clock import FakeClock


@pytest.fixture(autouse=True)
def _no_active_run_left():
    """A test that fails mid-run must not leave its run active for the next test."""
    yield
    from trainmeter.core.monitor import active

    left = active()
    if left is not None:
        left.finish("completed")
    from trainmeter.core import monitor as monitor_module

    monitor_module._UNSAVED = None  # a passport a test's full disk kept in memory is not the next test's


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def ip():
    """IPython's testing shell with the extension loaded."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "trainmeter")
    return shell


@pytest.fixture
def in_tmp(tmp_path: Path):
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def tiny_model_and_data(seed: int = 0):
    """A 2-layer MLP over token ids, an SGD optimizer and fixed batches."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randint(0, 32, (4, 6), generator=g), torch.randint(0, 32, (4,), generator=g)) for _ in range(20)]
    return model, opt, batches


def train_steps(model, opt, batches) -> list[float]:
    import torch.nn.functional as F

    losses = []
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
