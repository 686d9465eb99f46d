"""Shared fixtures: an injected clock, a run root, an IPython shell, a tiny model."""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from trainmeter.core.clock import FakeClock

# One intra-op thread for the tiny models here (kernels, ranks and notebooks started by tests inherit it): with
# torch's default of one per core, each op waits on a thread the busy machine has descheduled (a 4,000-step loop
# took 207 s beside other work, 11 s with one thread)
os.environ.setdefault("OMP_NUM_THREADS", "1")
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background (`cmd &`): the Ctrl-C tests
    signal.signal(signal.SIGINT, signal.default_int_handler)  # need Python's own handler, as in a terminal


if importlib.util.find_spec("xdist") is not None:

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        """Under pytest-xdist (``./dev test`` runs two workers) each browser test module runs on one worker, so its
        module-scoped fixture (a notebook opened and trained) is made once, not once per worker its tests land on;
        every other test is a unit of its own, as ``--dist load`` makes them. (Groups by mark do not serve here:
        pytest-xdist's ``loadgroup`` renames a test by ``_nodeid``, which pytest 9.2 no longer reads.)"""
        from xdist.scheduler import LoadScopeScheduling

        class BrowserModules(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return nodeid.split("::", 1)[0] if nodeid.startswith("tests/browser/") else nodeid

        return BrowserModules(config, log)


@pytest.fixture(autouse=True)
def _monitor_warnings_are_errors(request: pytest.FixtureRequest):
    """trainmeter's own warnings fail the test that did not expect them: one it expects is caught by
    ``pytest.warns(MonitorWarning)``, or matches a pattern of its ``monitor_warns`` mark (a warning it may give, not
    one it checks). Recorded from every thread; other warnings go on to pytest's summary as before."""
    import re
    import warnings

    from trainmeter.core.faults import MonitorWarning

    marks = [m for mark in request.node.iter_markers("monitor_warns") for m in mark.args]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", MonitorWarning)
        yield
    ours = [str(w.message) for w in seen if issubclass(w.category, MonitorWarning)]
    for w in seen:
        if not issubclass(w.category, MonitorWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    unexpected = [m for m in ours if not any(re.search(pattern, m) for pattern in marks)]
    if unexpected:
        pytest.fail(f"unexpected trainmeter warning(s): {unexpected}")


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
    leaks = leaked_patches()
    if leaks:
        from trainmeter.core.patches import ORIGINAL_ATTR

        for owner, attr in leaks:  # put torch back for the next test, then fail this one
            own = getattr(getattr(owner, attr), ORIGINAL_ATTR)
            if isinstance(owner, type):
                delattr(owner, attr)
                if getattr(owner, attr, None) is not own:
                    setattr(owner, attr, own)
            else:
                setattr(owner, attr, own)
        pytest.fail(f"a trainmeter patch was left in torch after the test (invariant 2): {leaks}")


def leaked_patches() -> list[tuple[object, str]]:
    """trainmeter wrappers still installed in torch (module classes, autograd, optimizers, compile)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return []
    from trainmeter.core.patches import ORIGINAL_ATTR

    leaks: list[tuple[object, str]] = []
    seen: set[type] = set()
    stack = [torch.nn.Module]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
        for attr in ("__call__", "training_step"):
            if hasattr(vars(cls).get(attr), ORIGINAL_ATTR):
                leaks.append((cls, attr))
    owners = [(torch.autograd, "backward"), (torch, "compile"), (torch.optim.Optimizer, "__init__")]
    scaler = sys.modules.get("torch.amp.grad_scaler")
    if scaler is not None:
        owners.append((scaler.GradScaler, "scale"))
    leaks.extend((o, a) for o, a in owners if hasattr(getattr(o, a, None), ORIGINAL_ATTR))
    return leaks


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def cpu_burners():
    """Two processes spinning on the CPU for the test's duration (a loaded machine); killed after."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def _ip_shell():
    """IPython's testing shell with the extension loaded (one per session: starting it is slow)."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "trainmeter")
    return shell


@pytest.fixture
def ip(_ip_shell):
    """The session's shell; the names a test's cells left in its namespace are removed after it (a model and an
    optimizer left there would be found by a later test's run, as a notebook's leftovers are)."""
    before = set(_ip_shell.user_ns)
    yield _ip_shell
    for name in set(_ip_shell.user_ns) - before:
        _ip_shell.user_ns.pop(name, None)


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
