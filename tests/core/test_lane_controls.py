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
    stopped_line = f"after step {n * (WARM_STEPS + 1)}; lanes 1 at {WARM_STEPS + 1}, 2 at {WARM_STEPS + 1}"
    assert stopped_line in (m.run_dir / "passport.md").read_text()


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


def test_nan_stop_fires_on_a_nan_in_lane_3_names_the_lane_and_stops_it_at_that_step_and_every_lane(
        run_root, excepthook_calls):
    n, nan_at = 4, WARM_STEPS + 5  # lane 3's loss is NaN from its step nan_at + 1
    ready, go, done = threading.Barrier(n + 1), threading.Event(), {}
    firsts = [threading.Event() for _ in range(n)]
    threads = [_lane_thread(k, ready, go, done, nan_at=nan_at if k == 2 else None,
                            after_first=firsts[k - 1] if k else None, first=firsts[k]) for k in range(n)]
    with tm.monitor(run_dir=run_root, widget=False, alert="nan:stop") as m:
        for t in threads:
            t.start()
        ready.wait(30)
        go.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads) and excepthook_calls == []
    assert done[2] == nan_at and max(done.values()) < MAX_STEPS  # lane 3 raised at its NaN step, the others after
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["status"] == "stopped" and p["stopped_by"] == "alert:nan:stop"
    [alert] = p["alerts"]
    assert alert["rule"] == "nan:stop" and alert["lane"] == 3
    assert f"the loss of lane 3 (thread 'lane-thread-2', train_loss.lane3) was nan at its step {nan_at + 1}" in (
        alert["sentence"])
    lanes = {lane["lane"]: lane for lane in p["lanes"]}
    assert lanes[3]["stopped_at_step"] == nan_at + 1 and all(lane["stopped_at_step"] for lane in lanes.values())
    stats = p["series"]["train_loss.lane3"]
    assert stats["last"] is None and stats["nonfinite"] == 1 and stats["count"] == nan_at + 1  # never a stale last


def test_a_nan_in_another_lane_is_seen_by_a_show_rule_and_named_without_stopping(run_root, excepthook_calls):
    ready, go, done = threading.Barrier(3), threading.Event(), {}
    first = threading.Event()
    threads = [_lane_thread(0, ready, go, done, first=first),
               _lane_thread(1, ready, go, done, nan_at=WARM_STEPS, after_first=first)]
    with tm.monitor(run_dir=run_root, widget=False, alert="nan:show") as m:
        for t in threads:
            t.start()
        ready.wait(30)
        go.set()
        while not m.extension("alerts").fired and any(t.is_alive() for t in threads):
            threading.Event().wait(0.05)  # the watchdog looks once a second
        assert m.status == "running"  # show: the run goes on
        tm.stop()
        for t in threads:
            t.join(30)
    [alert] = json.loads((m.run_dir / "passport.json").read_text())["alerts"]
    assert alert["rule"] == "nan:show" and alert["lane"] == 2 and "lane 2" in alert["sentence"]
