"""Stop and alerts act on every lane: each training thread stops at its next step, quietly (docs/spec.md §21)."""

from __future__ import annotations

import json
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402

pytestmark = pytest.mark.monitor_warns("training in several threads")

WARM_STEPS = 3
MAX_STEPS = 100_000  # a lane never stopped ends here (the test then fails)


def _lane_thread(k: int, ready: threading.Barrier, go: threading.Event, done: dict[int, int],
                 nan_at: int | None = None, after_first: threading.Event | None = None,
                 first: threading.Event | None = None) -> threading.Thread:
    """Thread ``k``: builds its model and optimizer, takes WARM_STEPS steps, meets the others, waits for ``go``,
    then trains until a stop; ``done[k]``: its steps completed (a NaN loss from step ``nan_at``)."""

    def work() -> None:
        torch.manual_seed(k)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        done[k] = 0
        for i in range(MAX_STEPS):
            if after_first is not None and i == 0:
                after_first.wait(30)  # lane numbers follow the order of first steps
            loss = F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1))
            if nan_at is not None and i >= nan_at:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
            done[k] += 1
            if first is not None and i == 0:
                first.set()
            if i + 1 == WARM_STEPS:
                ready.wait(30)
                go.wait(30)

    return threading.Thread(target=work, name=f"lane-thread-{k}")


@pytest.fixture
def excepthook_calls(monkeypatch):
    """What threading's excepthook is handed (a notebook's threads print each one)."""
    calls: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: calls.append(args.exc_value))
    return calls


@pytest.mark.parametrize("n", [4, 8])
def test_tm_stop_from_the_main_thread_ends_every_lane_at_its_next_step_quietly(run_root, excepthook_calls, n):
    ready, go, done = threading.Barrier(n + 1), threading.Event(), {}
    threads = [_lane_thread(k, ready, go, done) for k in range(n)]
    with tm.monitor(run_dir=run_root, widget=False) as m:
        for t in threads:
            t.start()
        ready.wait(30)  # every lane took WARM_STEPS steps and waits
        assert tm.stop() is True
        go.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert excepthook_calls == []  # no thread's StopTraining reached threading's excepthook
    assert done == dict.fromkeys(range(n), WARM_STEPS)  # each lane's next step was its last: it raised there
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["status"] == "stopped" and p["stopped_by"] == "tm.stop"
    assert sorted(lane["lane"] for lane in p["lanes"]) == list(range(1, n + 1))
    assert all(lane["stopped_at_step"] == WARM_STEPS + 1 == lane["steps"] for lane in p["lanes"])
    assert p["stopped_at_step"] == n * (WARM_STEPS + 1) == p["steps"]
    assert p["stop_requested_at_step"] == n * WARM_STEPS


def test_a_stopped_lane_that_catches_stop_training_runs_its_own_code_after_the_loop(run_root, excepthook_calls):
    caught: list[int] = []
    ready, go = threading.Barrier(3), threading.Event()

    def work(k: int) -> None:
        try:
            _lane_thread(k, ready, go, {}).run()
        except tm.StopTraining as stop:
            caught.append(stop.step)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    with tm.monitor(run_dir=run_root, widget=False) as m:
        for t in threads:
            t.start()
        ready.wait(30)
        tm.stop()
        go.set()
        for t in threads:
            t.join(30)
    assert caught == [WARM_STEPS + 1] * 2 and excepthook_calls == [] and m.status == "stopped"


def test_nan_stop_fires_on_a_nan_in_lane_3_names_the_lane_and_stops_every_lane(run_root, excepthook_calls):
    n = 4
    ready, go, done = threading.Barrier(n + 1), threading.Event(), {}
    firsts = [threading.Event() for _ in range(n)]
    threads = [_lane_thread(k, ready, go, done, nan_at=WARM_STEPS + 5 if k == 2 else None,
                            after_first=firsts[k - 1] if k else None, first=firsts[k]) for k in range(n)]
    with tm.monitor(run_dir=run_root, widget=False, alert="nan:stop") as m:
        for t in threads:
            t.start()
        ready.wait(30)
        go.set()
        for t in threads:
            t.join(60)  # the alerts' watchdog looks once a second; then each lane stops at its next step
    assert not any(t.is_alive() for t in threads) and excepthook_calls == []
    assert max(done.values()) < MAX_STEPS
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["status"] == "stopped" and p["stopped_by"] == "alert:nan:stop"
    [alert] = p["alerts"]
    assert alert["rule"] == "nan:stop" and alert["lane"] == 3 and "lane 3" in alert["sentence"]
    lanes = {lane["lane"]: lane for lane in p["lanes"]}
    assert lanes[3]["thread"] == "lane-thread-2" and all(lane["stopped_at_step"] for lane in lanes.values())
    stats = p["series"]["train_loss.lane3"]
    assert stats["last"] is None and stats["nonfinite"] == stats["count"] - WARM_STEPS - 5  # never a stale last
