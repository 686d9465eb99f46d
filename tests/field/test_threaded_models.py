"""Three models, each trained in its own thread with its own optimizer, fed by queues (docs/spec.md §2, "Threads").

The cell's own thread only starts the threads and waits: every step, sample and report comes
from the training threads. Counted exactly, run after run; each model is a lane named in the
passport; the live report advances while the cell's thread is blocked in ``join``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter.api as tm  # noqa: E402
from trainmeter.record.runlog import read_events  # noqa: E402

MODELS, STEPS, BATCH, REPEATS = 3, 60, 16, 10


def _run(run_root: Path) -> tuple[object, list[dict]]:
    models = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)) for _ in range(MODELS)]
    optimizers = [torch.optim.Adam(model.parameters(), lr=1e-3) for model in models]
    feeds: list[queue.Queue] = [queue.Queue(maxsize=4) for _ in range(MODELS)]
    interval_steps: list[int] = []

    def feeder() -> None:
        for _ in range(STEPS):
            for feed in feeds:
                feed.put((torch.randn(BATCH, 8), torch.randn(BATCH, 1)))

    def drafter(k: int) -> None:
        for _ in range(STEPS):
            x, y = feeds[k].get()
            loss = F.mse_loss(models[k](x), y)
            optimizers[k].zero_grad()
            loss.backward()
            optimizers[k].step()
            time.sleep(0.004)  # the device's time

    with tm.monitor(run_dir=run_root, interval_s=0.1) as m:
        threads = [threading.Thread(target=drafter, args=(k,), name=f"drafter{k}") for k in range(MODELS)]
        threads.append(threading.Thread(target=feeder, name="feeder"))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        interval_steps.append(m.reports)
    events = read_events(Path(m.run_dir) / "events.jsonl")
    return m, [e for e in events if e["kind"] == "interval"]


@pytest.mark.slow
@pytest.mark.monitor_warns("training in several threads")  # said once a run, checked in each passport below
def test_three_models_in_three_threads_are_counted_exactly_run_after_run(run_root, monkeypatch):
    for _ in range(REPEATS):
        m, intervals = _run(run_root)
        passport = json.loads((Path(m.run_dir) / "passport.json").read_text())
        assert (passport["steps"], passport["tokens"]) == (MODELS * STEPS, MODELS * STEPS * BATCH)
        lanes = passport["lanes"]
        assert [lane["lane"] for lane in lanes] == [1, 2, 3]
        assert sorted(lane["thread"] for lane in lanes) == ["drafter0", "drafter1", "drafter2"]
        assert all((lane["steps"], lane["tokens"], lane["model"], lane["optimizer"]) == (STEPS, STEPS * BATCH,
                   "Sequential", "Adam") for lane in lanes)
        assert {lane["loss_series"] for lane in lanes} == {"train_loss", "train_loss.lane2", "train_loss.lane3"}
        assert all(passport["series"][lane["loss_series"]]["count"] == STEPS for lane in lanes)
        # the live view advanced while the cell's thread waited in join: reports before the last one saw steps
        live = [e["step"] for e in intervals[:-1]]
        assert live and max(live) > 0 and live == sorted(live)
        assert "| lane | thread |" in (Path(m.run_dir) / "passport.md").read_text()
        assert sum("several threads" in w for w in passport["warnings"]) == 1
