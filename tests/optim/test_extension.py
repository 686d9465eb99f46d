"""The optimizer extension on real torch loops: lr at each step, the returned grad norm, reasons, sampling, ranks."""

from __future__ import annotations

import copy
import io
import json
import pickle

import pytest
import torch
import torch.nn as nn

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.optim.extension import OptimExtension, rank_from_env
from trainmeter.optim.grad_norm import REASON_BY_VALUE, REASON_NO_CLIP
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events


def _monitor(run_root, ext, **kwargs):
    kwargs.setdefault("text", False)
    return make_monitor(make_options(run_dir=run_root, interval_s=3600, name="optim"), extensions=[ext], **kwargs)


def _points(m, name):
    """(step, value) of series ``name`` as written to the run log."""
    out = []
    for event in read_events(m.run_dir / "events.jsonl"):
        if event["kind"] == "series" and event["name"] == name:
            out += list(zip(event["step"], event["value"], strict=True))
    return out


def _loop(steps=12, clip="norm", groups=None, seed=0, tick=None):
    """AdamW + cosine schedule; returns (expected lr per step, returned norm per step)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 3))
    params = groups(model) if groups else model.parameters()
    opt = torch.optim.AdamW(params, lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    lrs, norms = [], []
    for _ in range(steps):
        if tick is not None:
            tick()
        loss = model(torch.randn(4, 6)).pow(2).mean()
        loss.backward()
        if clip == "norm":
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
        elif clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.1)
        lrs.append(sched.get_last_lr())  # the rate this step uses
        opt.step()
        sched.step()  # sets the next step's rate
        opt.zero_grad()
    return lrs, norms


def test_lr_is_the_schedulers_rate_at_each_step_and_grad_norm_the_returned_norm(run_root):
    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    lrs, norms = _loop()
    m.finish("completed")
    assert _points(m, "lr") == [(i + 1, pytest.approx(lr[0], rel=1e-12)) for i, lr in enumerate(lrs)]
    assert _points(m, "grad_norm") == [(i + 1, pytest.approx(n, rel=1e-7)) for i, n in enumerate(norms)]
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["series"]["lr"]["count"] == 12 and passport["series"]["grad_norm"]["count"] == 12
    assert passport["optim"]["grad_norm"]["missing"] is None
    assert passport["optim"]["lr"]["source"].startswith("param_groups of the primary optimizer (AdamW)")


def test_clip_functions_are_restored_and_still_return_the_norm(run_root):
    originals = (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_,
                 torch.nn.utils.clip_grad_value_)
    m = _monitor(run_root, OptimExtension(environ={})).start()
    assert torch.nn.utils.clip_grad_norm_ is not originals[0]
    p = nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), 3.0)
    assert float(torch.nn.utils.clip_grad_norm_([p], 1.0)) == pytest.approx(6.0)
    m.finish("completed")
    assert (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_,
            torch.nn.utils.clip_grad_value_) == originals


def test_a_raising_clip_call_raises_the_same_exception(run_root):
    m = _monitor(run_root, OptimExtension(environ={})).start()
    p = nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_([p], 1.0, norm_type=float("nan"), error_if_nonfinite=True)
    m.finish("completed")


def test_loop_without_clipping_has_no_grad_norm_and_says_why(run_root):
    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    _loop(steps=3, clip=None)
    rows = {r["label"]: r for r in ext.panels()[0]["rows"]}
    m.finish("completed")
    assert _points(m, "grad_norm") == []
    assert len(_points(m, "lr")) == 3
    assert rows["gradient norm"]["value"] is None and rows["gradient norm"]["note"] == REASON_NO_CLIP
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["optim"]["grad_norm"]["missing"] == REASON_NO_CLIP
    assert "grad_norm" not in passport["series"]


def test_clipping_by_value_says_it_computes_no_norm(run_root):
    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    _loop(steps=2, clip="value")
    m.finish("completed")
    assert ext.grad_norm_missing() == REASON_BY_VALUE


def test_groups_with_different_rates_get_their_own_series(run_root):
    def groups(model):
        return [{"params": model[0].parameters(), "name": "body"}, {"params": model[1].parameters(), "lr": 1e-2}]

    m = _monitor(run_root, OptimExtension(environ={})).start()
    lrs, _ = _loop(steps=3, groups=groups)
    m.finish("completed")
    assert [v for _, v in _points(m, "lr/body")] == pytest.approx([lr[0] for lr in lrs])
    assert [v for _, v in _points(m, "lr/1")] == pytest.approx([lr[1] for lr in lrs])
    assert [v for _, v in _points(m, "lr")] == pytest.approx([lr[0] for lr in lrs])


def test_a_manual_rate_change_is_recorded_at_the_step_that_uses_it(run_root):
    m = _monitor(run_root, OptimExtension(environ={})).start()
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    for lr in (0.1, 0.5, 0.5):
        opt.param_groups[0]["lr"] = lr
        p.grad = torch.ones(2)
        opt.step()
    m.finish("completed")
    assert _points(m, "lr") == [(1, 0.1), (2, 0.5), (3, 0.5)]


def test_each_optimizer_has_its_own_rate_series_the_primarys_is_lr(run_root):
    m = _monitor(run_root, OptimExtension(environ={})).start()
    a, b = nn.Parameter(torch.ones(1)), nn.Parameter(torch.ones(1))
    opt_a, opt_b = torch.optim.SGD([a], lr=0.1), torch.optim.SGD([b], lr=0.9)
    sched_b = torch.optim.lr_scheduler.StepLR(opt_b, step_size=1, gamma=0.5)
    for _ in range(3):
        a.grad, b.grad = torch.ones(1), torch.ones(1)
        opt_a.step()
        opt_b.step()
        sched_b.step()
    m.finish("completed")
    p = json.loads((m.run_dir / "passport.json").read_text())["optim"]["lr"]
    assert _points(m, "lr") == [(1, 0.1), (2, 0.1), (3, 0.1)]
    # read at the primary's step: the rate opt_b's step of that iteration used (its scheduler steps after it)
    assert _points(m, "lr.optimizer2") == [(1, 0.9), (2, 0.45), (3, 0.225)]
    assert p["series"] == ["lr", "lr.optimizer2"] and p["optimizers"] == {"lr": "SGD", "lr.optimizer2": "SGD"}


def test_their_optimizer_copies_and_pickles_without_our_hook(run_root):
    m = _monitor(run_root, OptimExtension(environ={})).start()
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones(2)
    opt.step()
    assert b"trainmeter" not in pickle.dumps(opt)
    copy.deepcopy(opt)
    m.finish("completed")


@pytest.mark.monitor_warns("no module holding")  # a bare parameter: no batch
def test_a_high_step_rate_is_sampled_every_kth_step(run_root):
    clock = FakeClock(100.0)
    ext = OptimExtension(environ={}, max_points_per_s=100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="fast"), clock=clock, text=False,
                     extensions=[ext]).start()
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    for _ in range(1000 + 40):  # 1000 steps/s on the injected clock: the first report sets k = 10
        clock.advance(0.001)
        p.grad = torch.ones(2)
        opt.step()
    m.finish("completed")
    steps = [s for s, _ in _points(m, "lr")]
    assert ext.stride == 10
    first_report = next(e["step"] for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval")
    assert steps[:first_report] == list(range(1, first_report + 1))
    assert all(b - a == 10 for a, b in zip(steps[first_report - 1:-1], steps[first_report:], strict=True))
    assert json.loads((m.run_dir / "passport.json").read_text())["optim"]["sample_every_steps"] == 10


def test_smoothed_loss_is_beside_the_raw_loss_on_the_text_line(run_root):
    out, clock = io.StringIO(), FakeClock(100.0)
    ext = OptimExtension(environ={"RANK": "0"})
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="line"), text=True, out=out, clock=clock,
                     extensions=[ext]).start()
    _loop(steps=3, tick=lambda: clock.advance(1.0))
    m.finish("completed")
    # a step's captured loss is appended once the next step begins (a tm.emit right after the step may replace it)
    second = out.getvalue().splitlines()[1]
    assert second.startswith("[step 2] loss=") and " (ema~" in second and " | lr=" in second and " | grad_norm=" in second
    assert ext.ema.count == 3


def test_only_rank_zero_prints_the_line(run_root):
    out, clock = io.StringIO(), FakeClock(100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="rank1"), text=True, out=out, clock=clock,
                     extensions=[OptimExtension(environ={"RANK": "1"})]).start()
    _loop(steps=2, tick=lambda: clock.advance(1.0))
    m.finish("completed")
    assert "[step" not in out.getvalue() and m.text_line.startswith("[step 2]")


def test_rank_is_read_from_the_environment():
    assert rank_from_env({"RANK": "3"}) == 3
    assert rank_from_env({}) is None and rank_from_env({"RANK": "x"}) is None


def test_charts_draw_lr_on_a_log_axis_while_it_is_positive(run_root):
    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    _loop(steps=2)
    charts = {c["id"]: c for c in ext.charts()}
    m.finish("completed")
    assert charts["lr"]["series"] == ["lr"] and charts["lr"]["log_y"] is True and charts["lr"]["x"] == "step"
    assert charts["grad_norm"]["series"] == ["grad_norm"]


def test_the_widget_draws_lr_once_on_its_log_axis(run_root):
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    ext = OptimExtension(environ={})
    m = _monitor(run_root, ext).start()
    _loop(steps=2)
    charts = {c["id"]: c for c in build_state(facts_from_monitor(m.context))["charts"]}
    m.finish("completed")
    assert charts["lr"]["log_y"] is True and "series:lr" not in charts and "series:grad_norm" not in charts
    assert charts["grad_norm"]["series"] == ["grad_norm"]


def test_a_new_optimizer_is_read_from_its_first_step_once_the_first_is_gone(run_root):
    import gc

    m = _monitor(run_root, OptimExtension(environ={})).start()
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones(2)
    opt.step()
    del opt
    gc.collect()
    opt = torch.optim.SGD([p], lr=0.7)
    for _ in range(3):
        opt.step()
    m.finish("completed")
    assert _points(m, "lr") == [(1, 0.1), (2, 0.7), (3, 0.7), (4, 0.7)]


def test_a_norm_from_an_earlier_step_is_never_recorded_at_a_later_one(run_root):
    """Sampled 1 step in 10, a loop clipping only on steps the sampling skips records no grad_norm there."""
    clock = FakeClock(100.0)
    ext = OptimExtension(environ={}, max_points_per_s=100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="stale"), clock=clock, text=False,
                     extensions=[ext]).start()
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    returned = {}
    for step in range(1, 1041):  # 1000 steps/s on the injected clock: the first report sets the stride to 10
        clock.advance(0.001)
        model(torch.randn(4, 6)).pow(2).mean().backward()
        if step % 10 == 5:
            returned[step] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5))
        opt.step()
        opt.zero_grad()
    m.finish("completed")
    first_report = next(e["step"] for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval")
    assert ext.stride == 10 and first_report % 10 != 5
    points = _points(m, "grad_norm")
    assert [s for s, _ in points] == [s for s in returned if s <= first_report]  # each at the step that clipped
    assert [v for _, v in points] == pytest.approx([returned[s] for s, _ in points])


@pytest.mark.monitor_warns("no module holding")  # a bare parameter: no batch
def test_steps_the_sampling_skips_run_no_code_of_the_wing(run_root):
    """At a sampled rate the core calls the hook only at the steps it asked for (Monitor.next_step_hook_at)."""
    clock = FakeClock(100.0)
    ext = OptimExtension(environ={}, max_points_per_s=100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="skip"), clock=clock, text=False,
                     extensions=[ext]).start()
    calls = []
    m.set_step_hook(lambda: (calls.append(m.steps), ext.on_step()))  # the dispatcher's single hook, counted
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    for _ in range(1000 + 40):  # 1000 steps/s: the first report sets the stride to 10
        clock.advance(0.001)
        p.grad = torch.ones(2)
        opt.step()
    m.finish("completed")
    first_report = next(e["step"] for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval")
    after = [s for s in calls if s > first_report]
    assert ext.stride == 10 and after and all(b - a == 10 for a, b in zip(after, after[1:], strict=False))
    assert len(calls) == first_report + len(after)  # every step before the first report, then 1 in 10


def test_the_report_worker_folds_the_loss_ahead_and_each_report_shows_the_fold_up_to_its_step(run_root,
                                                                                              monkeypatch) -> None:
    import math
    import threading
    import time

    from trainmeter.core import report_worker
    from trainmeter.core.report_worker import THREAD_NAME
    from trainmeter.core.series_views import SeriesViews
    from trainmeter.optim.smoothing import LossEma

    monkeypatch.setattr(report_worker, "FOLD_EVERY_S", 0.01)
    monkeypatch.setattr(report_worker, "MAX_FOLD_EVERY_S", 0.01)
    threads: list[str] = []
    catch_up = SeriesViews.catch_up

    def spy(self, ends=None):
        threads.append(threading.current_thread().name)
        return catch_up(self, ends)

    monkeypatch.setattr(SeriesViews, "catch_up", spy)
    losses = {step: math.nan if step == 77 else 1.0 + math.sin(step / 9.0) / (1 + step / 100) for step in range(1, 601)}
    m = _monitor(run_root, OptimExtension(), probes=False).start()  # the real clock: a threaded worker
    for step in range(1, 601):
        m.record({"train_loss": losses[step]}, step=step)
        m.on_step(8)
        if step % 100 == 0:
            time.sleep(0.1)  # the worker's turn: from the first report on, it folds the points ahead
            m.steps_state.next_report_s = float("-inf")
            m.maybe_report()
    m.finish("completed")
    assert THREAD_NAME in threads and threading.main_thread().name in threads  # ahead, and the first report's
    reported = [e["optim"]["loss_ema"] for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval"]
    twin = LossEma().twin("train_loss", list(losses), list(losses.values()))[1]
    assert len(reported) == 7 and reported[-1]["step"] == 600
    for r in reported:  # each report: the fold of every point up to the step it names, bit for bit
        assert r["step"] >= 100 * (reported.index(r) + 1) and r["value"] == twin[r["step"] - 1]


class _TickingClock(FakeClock):
    """A fake clock that also moves by ``tick_s`` at each read: a read costs that much time."""

    def __init__(self, start_s: float, tick_s: float) -> None:
        super().__init__(start_s)
        self.tick_s = tick_s

    def __call__(self) -> float:
        self.now_s += self.tick_s
        return self.now_s


@pytest.mark.monitor_warns("no module holding")  # a bare parameter: no batch
def test_a_read_costly_beside_its_step_is_sampled_by_its_cost_after_step_100(run_root):
    """1 ms steps and a 1 us read: read at most 0.02% of a step, so 1 step in 5 (a ratio: no wall rate used)."""
    clock = _TickingClock(100.0, 1e-6)
    ext = OptimExtension(environ={})
    m = make_monitor(make_options(run_dir=run_root, interval_s=3600, name="cost"), clock=clock, text=False,
                     extensions=[ext]).start()
    calls = []
    m.set_step_hook(lambda: (calls.append(m.steps), ext.on_step()))
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    for _ in range(200):
        clock.advance(0.001)
        p.grad = torch.ones(2)
        opt.step()
    stride = ext.stride
    m.finish("completed")  # (its report sets the rate's stride: 1,000 steps/s, so 10)
    assert calls[:101] == list(range(1, 102))  # every step until step 100, whatever the cost
    assert calls[101:] == list(range(106, 201, 5)) and stride == 5  # step 101's read set the stride
    assert [s for s, _ in _points(m, "lr")] == calls


def test_a_steady_report_on_the_worker_raises_the_stride_for_the_next_read_and_schedules_no_hook_there(run_root):
    import threading
    import time

    from trainmeter.core.report_worker import THREAD_NAME

    ext = OptimExtension(max_points_per_s=1.0)
    m = _monitor(run_root, ext, probes=False).start()
    calls: list[str] = []
    schedule = m.next_step_hook_at

    def spy(step, extension=None):
        calls.append(threading.current_thread().name)
        return schedule(step, extension)

    m.next_step_hook_at = spy
    for _ in range(2):
        time.sleep(0.05)
        m.on_step(8)
    m.report_now()  # the first report, on the training thread: ~20 steps/s, stride ~20
    first = ext.stride
    for _ in range(2000):
        m.on_step(8)
    m.report_now()  # a steady report: its fields on the worker, from a much faster window
    assert m.worker.drain(10)
    assert ext.stride > first and THREAD_NAME not in calls
    m.finish("completed")
    strides = [e["optim"]["sample_every_steps"] for e in read_events(m.run_dir / "events.jsonl")
               if e["kind"] == "interval"]
    assert strides[1] > strides[0] > 1


def test_a_schedule_free_optimizers_rate_is_the_one_its_warmup_applied_not_the_flat_base(run_root):
    import trainmeter as tm

    schedulefree = pytest.importorskip("schedulefree")
    model = nn.Linear(4, 1)
    opt = schedulefree.AdamWScheduleFree(model.parameters(), lr=0.01, warmup_steps=4)
    opt.train()
    applied = []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(6):
            model(torch.ones(2, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            applied.append(opt.param_groups[0]["scheduled_lr"])  # the library's own "for logging" rate
    assert _points(m, "lr") == [(i + 1, lr) for i, lr in enumerate(applied)]
    assert applied[0] < applied[3] == 0.01  # the warmup, where param_groups' "lr" stays 0.01 throughout
    assert "'scheduled_lr'" in json.loads((m.run_dir / "passport.json").read_text())["optim"]["lr"]["source"]
    assert m.warnings == []


def test_muon_with_adamw_records_both_rates_each_as_its_own_series(run_root):
    import trainmeter as tm

    if not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon needs torch 2.9")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    hidden = [p for p in model.parameters() if p.ndim == 2]  # the usual recipe: Muon for matrices, AdamW the rest
    rest = [p for p in model.parameters() if p.ndim != 2]
    used = []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        muon, adamw = torch.optim.Muon(hidden, lr=0.02), torch.optim.AdamW(rest, lr=3e-4)
        scheds = [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=3) for o in (muon, adamw)]
        for _ in range(4):
            model(torch.randn(4, 6)).pow(2).mean().backward()
            used.append((muon.param_groups[0]["lr"], adamw.param_groups[0]["lr"]))
            muon.step()
            adamw.step()
            for sched in scheds:
                sched.step()
            muon.zero_grad()
            adamw.zero_grad()
    assert _points(m, "lr") == [(i + 1, a) for i, (a, _) in enumerate(used)]
    assert _points(m, "lr.optimizer2") == [(i + 1, b) for i, (_, b) in enumerate(used)]
    lr = json.loads((m.run_dir / "passport.json").read_text())["optim"]["lr"]
    assert lr["optimizers"] == {"lr": "Muon", "lr.optimizer2": "AdamW"} and m.steps == 4 and m.warnings == []
