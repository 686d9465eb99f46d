"""A finished run leaves nothing of ours alive: the monitor, its series and its probes are collected once the user
drops the run (issue 37: nothing held after the run)."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402


def test_a_finished_run_its_series_and_probes_are_collected_once_the_user_drops_it(run_root):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with tm.monitor(name="held", run_dir=run_root, interval_s=0.1) as run:
        for _ in range(300):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        run.report_now()
    refs = [weakref.ref(part) for part in (run, run.probes, run.registry, run.reporter, run.lifecycle, run.emitter)]
    assert (run.run_dir / "passport.json").exists()
    del run
    gc.collect()
    assert [r for r in refs if r() is not None] == []
