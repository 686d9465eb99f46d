"""A report window with no completed step has no rate: null in the record, no point on the chart (docs/spec.md
section 3, "know or say unknown")."""

from __future__ import annotations

import json
import time

import trainmeter as tm
from trainmeter.widget.show import replay


def _intervals(run_dir):
    lines = (json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines())
    return [r for r in lines if r.get("kind") == "interval"]


def test_report_windows_with_no_step_the_first_and_the_final_have_a_null_rate_and_no_point_at_0(tmp_path, capsys):
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with tm.monitor(name="late-step", interval_s=0.1, run_dir=tmp_path, widget=False) as run:
        loss = model(x).pow(2).mean()  # a batch is read; no step yet
        time.sleep(0.15)
        tm.emit(note=1.0)  # a report at this emit boundary: its window holds no completed step
        for _ in range(3):
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.06)
            loss = model(x).pow(2).mean()
        time.sleep(0.15)
        opt.zero_grad()
        loss.backward()
        opt.step()  # past the interval: a report at this step, then the final one with no step
    records = _intervals(run.run_dir)
    first, final = records[0], records[-1]  # the final report comes right after one at the last step's boundary
    for r in (first, final):
        assert r["throughput"]["window_steps"] == 0 and r["throughput"]["window_train_s"] > 0, r
        assert r["throughput"]["train_tokens_per_s"] is None and r["throughput"]["seconds_per_step"] is None, r
    assert all(r["throughput"]["train_tokens_per_s"] for r in records[1:-1])  # windows with steps have their rate
    _, columns, _ = replay(run.run_dir)
    rate = next(c for c in columns if c.name == "train_tokens_per_s")
    assert rate.ys and min(rate.ys) > 0 and first["elapsed_s"] < min(rate.xs) <= max(rate.xs) < final["elapsed_s"]
    capsys.readouterr()


def test_a_window_whose_one_step_is_the_runs_first_is_kept_in_the_record_but_not_drawn(tmp_path, capsys):
    # the browser's case: `import torch` in the cell made the first report's window the startup plus one step, drawn
    # as a point near 0 before the run's rate (the ETA's pace leaves that step out too: widget/live_rate.py)
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with tm.monitor(name="slow-start", interval_s=0.1, run_dir=tmp_path, widget=False) as run:
        time.sleep(0.3)  # the cell's imports and model build, before the first step
        for _ in range(12):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            time.sleep(0.02)
    first = _intervals(run.run_dir)[0]
    assert first["step"] == 1 and first["throughput"]["train_tokens_per_s"] > 0  # measured, kept
    _, columns, _ = replay(run.run_dir)
    rate = next(c for c in columns if c.name == "train_tokens_per_s")
    assert rate.ys and min(rate.xs) > first["elapsed_s"], (rate.xs, first["elapsed_s"])
    capsys.readouterr()


def test_the_live_chart_leaves_out_the_first_steps_window_too(run_root):
    from tests.widget.test_publisher import Recorder, _monitor, _train
    from trainmeter.core.clock import FakeClock
    from trainmeter.widget.publisher import Publisher

    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, interval_s=1.0)
    rec = Recorder(clock)
    pub = Publisher(m.context, rec, clock=clock)
    clock.advance(2.0)  # the startup: the first step ends 2 s in, past the first report's time
    m.on_step(128, loss_value=1.0)
    pub.tick()
    _train(m, clock, pub, seconds=4, steps_per_s=40)
    m.finish("completed")
    pub.close()
    xs, ys = rec.store["train_tokens_per_s"]
    assert xs and min(xs) > 2.0 and min(ys) > 1000, (xs, ys)  # 40 steps/s x 128 tokens: no point near 0
