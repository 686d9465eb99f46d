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
