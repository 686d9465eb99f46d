"""Bounded curves: decimated loss columns, thinned report rows, interpolation by step, the run-log fallback."""

from __future__ import annotations

import json
import math

import pytest

from trainmeter.comparison.extension import Curves, curves_from_events, interpolate


def test_a_million_loss_points_keep_the_budget_and_the_extremes() -> None:
    c = Curves(budget_points=500)
    for start in range(0, 1_000_000, 10_000):
        steps = list(range(start + 1, start + 10_001))
        c.add_series("train_loss", steps, [1.0 + 1.0 / s for s in steps])
    c.add_series("train_loss", [1_000_001], [0.5])
    doc = c.to_dict()["series"]["train_loss"]
    assert len(doc["step"]) <= 500 and doc["count"] == 1_000_001
    assert max(doc["value"]) == 2.0 and min(doc["value"]) == 0.5


def test_report_rows_are_thinned_to_every_other_when_full() -> None:
    c = Curves(max_reports=8)
    for i in range(1, 10):
        c.add_report(step=i * 10, tokens=i * 100, elapsed_s=float(i), tokens_per_s=5.0, mfu={"hf": 0.1 * i})
    rows = c.to_dict()
    assert len(rows["reports"]["step"]) <= 8 and rows["reports"]["step"][-1] == 90
    assert len(rows["mfu"]["hf"]) == len(rows["reports"]["step"])


def test_a_convention_that_appears_later_is_aligned_with_none() -> None:
    c = Curves()
    c.add_report(step=1, tokens=1, elapsed_s=1.0, tokens_per_s=1.0)
    c.add_report(step=2, tokens=2, elapsed_s=2.0, tokens_per_s=1.0, mfu={"hf": 0.5})
    assert c.to_dict()["mfu"] == {"hf": [None, 0.5]}


def test_interpolate_is_linear_and_clamped() -> None:
    assert interpolate([-1, 0, 5, 10, 20], [0, 10], [0, 100]) == [0, 0, 50, 100, 100]


def test_events_fallback_skips_step_columns_and_reads_losses_and_reports(tmp_path) -> None:
    lines = [
        {"schema_version": 1, "kind": "start", "name": "x"},
        {"schema_version": 1, "kind": "steps", "name": "tokens_per_step", "step": [1, 2], "value": [9, 9]},
        {"schema_version": 1, "kind": "series", "name": "train_loss", "x": "step", "step": [1, 2], "t_us": [1, 2],
         "value": [3.0, None]},
        {"schema_version": 1, "kind": "series", "name": "lr", "x": "step", "step": [1], "value": [0.1]},
        {"schema_version": 1, "kind": "interval", "step": 2, "tokens": 18, "elapsed_s": 1.5,
         "throughput": {"train_tokens_per_s": 12.0}, "compute": {"mfu[hf]": 0.25, "flops_spent[hf]": 1e9}},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x, separators=(",", ":")) for x in lines) + "\n")
    doc = curves_from_events(path)
    assert doc["series"]["train_loss"]["step"] == [1, 2] and math.isnan(doc["series"]["train_loss"]["value"][1])
    assert "lr" not in doc["series"]
    assert doc["reports"] == {"step": [2], "tokens": [18], "elapsed_s": [1.5], "tokens_per_s": [12.0]}
    assert doc["mfu"] == {"hf": [pytest.approx(0.25)]}
