"""Lanes: models trained in several threads, each counted by its own thread, the headline their sum (docs/spec.md §2)."""

from __future__ import annotations

import json
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainmeter.core.clock import FakeClock  # noqa: E402
from trainmeter.core.discovery import DISCOVERY_STEPS  # noqa: E402
from trainmeter.core.monitor import MonitorWarning  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402

BATCH = 16


def _model(seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _step(model, opt) -> float:
    x, y = torch.randn(BATCH, 8), torch.randn(BATCH, 1)
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def _started(tmp_path, clock, interval_s=3600.0):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=interval_s, widget=False), clock=clock,
                        text=False, extensions=[]).start()


def _in_threads(work, n=3):
    threads = [threading.Thread(target=work, args=(k,), name=f"drafter{k}") for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_three_models_in_three_threads_are_counted_exactly_each_in_its_own_lane(tmp_path):
    m = _started(tmp_path, FakeClock(0.0))
    pairs = [_model(k) for k in range(3)]
    losses: dict[int, list[float]] = {}
    go = threading.Barrier(3)

    def work(k: int) -> None:
        go.wait()  # all three train at once
        losses[k] = [_step(*pairs[k]) for _ in range(60)]

    with pytest.warns(MonitorWarning, match="training in several threads"):
        _in_threads(work)
    m.finish("completed")
    assert m.steps == 180 and m.tokens == 180 * BATCH
    lanes = m.lane_records()
    assert [lane.lane for lane in lanes] == [1, 2, 3]
    assert sorted(lane.thread for lane in lanes) == ["drafter0", "drafter1", "drafter2"]
    assert all(lane.steps == 60 and lane.tokens == 60 * BATCH and lane.model == "Sequential" for lane in lanes)
    by_thread = {lane.thread: lane for lane in lanes}
    for k in range(3):  # each lane's loss is its own model's, point for point
        name = by_thread[f"drafter{k}"].loss_series
        assert name == ("train_loss" if by_thread[f"drafter{k}"].lane == 1 else f"train_loss.lane{by_thread[f'drafter{k}'].lane}")
        assert m.series[name].stats().count == 60
        assert m.series[name].stats().last == pytest.approx(losses[k][-1], rel=1e-6)
    assert not any(name.startswith("train_loss.optimizer") for name in m.series)
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert [lane["steps"] for lane in passport["lanes"]] == [60, 60, 60]
    assert "| lane | thread |" in (m.run_dir / "passport.md").read_text()
    assert sum("several threads" in w for w in m.warnings) == 1


def test_a_thread_that_starts_many_steps_after_the_first_still_has_its_samples_counted(tmp_path):
    # the GIL's switch interval (5 ms) lets the first thread run tens of tiny steps before another runs at all
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock)
    pairs = [_model(k) for k in range(2)]
    first_done = threading.Event()

    def work(k: int) -> None:
        if k == 1:
            first_done.wait(60)
        for _ in range(4 * DISCOVERY_STEPS):
            _step(*pairs[k])
            if k == 0:
                clock.advance(0.001)
        first_done.set()

    with pytest.warns(MonitorWarning, match="several threads"):
        _in_threads(work, n=2)
    m.finish("completed")
    assert m.steps == 8 * DISCOVERY_STEPS and m.tokens == 8 * DISCOVERY_STEPS * BATCH
    assert [lane.tokens for lane in m.lane_records()] == [4 * DISCOVERY_STEPS * BATCH] * 2


def test_another_optimizers_model_left_uncalled_is_unwatched_once_the_keep_time_has_passed(tmp_path):
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock)
    (model, opt), (other, _other_opt) = _model(0), _model(1)
    for _ in range(3 * DISCOVERY_STEPS):
        _step(model, opt)
        clock.advance(1.0)  # 60 s in all, past KEEP_OTHERS_S
    probes = m.probes
    candidates = probes.discovery.candidates
    assert id(other) not in candidates and id(model) in candidates
    m.finish("completed")


def test_one_training_thread_is_one_lane_and_keeps_the_fast_path(tmp_path):
    m = _started(tmp_path, FakeClock(0.0))
    model, opt = _model(0)
    for _ in range(30):
        _step(model, opt)
    m.finish("completed")
    assert m.probes.hot_ident == threading.get_ident() and m.probes.steady_steps > 0
    assert [(lane.lane, lane.steps) for lane in m.lane_records()] == [(1, 30)]
    assert "| lane |" not in (m.run_dir / "passport.md").read_text()
    assert not any("several threads" in w for w in m.warnings)


def test_a_report_runs_on_another_lanes_thread_when_the_interval_passes(tmp_path):
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock, interval_s=1.0)
    first, other = _model(0), _model(1)
    _step(*first)  # lane 1: this thread, which then stops stepping
    reported_in: list[str] = []
    real = m.reporter._body

    def spy(final, t0):
        reported_in.append(threading.current_thread().name)
        real(final, t0)

    m.reporter._body = spy

    def work(_k: int) -> None:
        for _ in range(5):
            clock.advance(0.6)
            _step(*other)

    with pytest.warns(MonitorWarning, match="several threads"):
        _in_threads(work, n=1)
    assert reported_in and set(reported_in) == {"drafter0"} and m.reports == len(reported_in)
    assert m.interval is not None and m.steps == 6
    m.finish("completed")


def test_a_thread_that_finds_another_reporting_goes_on_without_waiting(tmp_path):
    clock = FakeClock(0.0)
    m = _started(tmp_path, clock, interval_s=1.0)
    model, opt = _model(0)
    _step(model, opt)
    clock.advance(2.0)
    m.reporter._lock.acquire()  # another thread is reporting
    try:
        _step(model, opt)
        assert m.reports == 0 and m.steps == 2  # counted, not reported, not blocked
    finally:
        m.reporter._lock.release()
    _step(model, opt)
    assert m.reports == 1
    m.finish("completed")


def test_two_optimizers_in_one_other_thread_count_the_first_and_record_the_second_loss(tmp_path):
    m = _started(tmp_path, FakeClock(0.0))
    main_pair = _model(0)
    g, g_opt = _model(1)
    d, d_opt = _model(2)
    _step(*main_pair)

    def work(_k: int) -> None:
        for _ in range(4):
            _step(d, d_opt)  # the thread's first optimizer: its lane
            _step(g, g_opt)  # a second optimizer in the same thread: its loss only

    with pytest.warns(MonitorWarning, match="several threads"):
        _in_threads(work, n=1)
    m.finish("completed")
    assert m.steps == 1 + 4 and m.tokens == 5 * BATCH
    assert m.series["train_loss.lane2"].stats().count == 4
    assert m.series["train_loss.lane2.optimizer2"].stats().count == 4


def test_each_lanes_loss_under_a_grad_scaler_is_the_unscaled_loss(tmp_path):
    m = _started(tmp_path, FakeClock(0.0))
    m.add_reader()  # keeps every point in memory for the asserts
    pairs = [_model(k) for k in range(3)]
    scales = [2.0 ** 10, 2.0 ** 13, 2.0 ** 16]  # one scaler per thread, each with its own scale
    losses: dict[int, list[float]] = {}
    go = threading.Barrier(3)

    def work(k: int) -> None:
        model, opt = pairs[k]
        scaler = torch.amp.GradScaler("cpu", init_scale=scales[k], growth_interval=1000)
        go.wait()
        mine = losses[k] = []
        for _ in range(20):
            x, y = torch.randn(BATCH, 8), torch.randn(BATCH, 1)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            mine.append(float(loss.detach()))

    with pytest.warns(MonitorWarning, match="training in several threads"):
        _in_threads(work)
    m.finish("completed")
    assert m.steps == 60
    by_thread = {lane.thread: lane.loss_series for lane in m.lane_records()}
    for k in range(3):  # point for point the loss the thread computed, never x its scale
        points = m.series[by_thread[f"drafter{k}"]].read(0)[3]
        assert list(points) == pytest.approx(losses[k], rel=1e-6), k
