"""The loss as the face shows it (docs/spec.md section 12; the smoothing rule: tests/optim/test_smoothing.py):
the tile's number in the legend, NaN/inf said as read in the alert colour, a diverged run's status."""

from __future__ import annotations

import math

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runs import load
from trainmeter.record.runs_table import RunsTable, run_row
from trainmeter.widget.view_model import build_state, facts_from_monitor, facts_from_run


def _run(run_root, losses: list[float]):
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=2.0, name="face"), clock=clock, text=False,
                     probes=False)
    m.start()
    for loss in losses:
        clock.advance(1.0)
        m.on_step(100, loss_value=loss)
    return m


def _loss(state):
    return next(t for t in state["tiles"] if t["id"] == "loss"), next(c for c in state["charts"] if c["id"] == "loss")


def test_a_nan_loss_reads_nan_in_the_alert_colour_on_the_tile_legend_and_status(run_root):
    m = _run(run_root, [2.0, 1.5, math.nan, math.nan])  # the newest point is read a step behind
    tile, chart = _loss(build_state(facts_from_monitor(m.context)))
    assert tile["text"] == "nan" and tile["alert"] and "missing" not in tile
    assert chart["latest"] == {"train_loss": "nan"}
    m.finish("completed")
    state = build_state(facts_from_monitor(m.context))
    assert state["loss_state"] == "nonfinite"
    run = load(m.run_dir)
    saved = build_state(facts_from_run(run.passport, run.events(), run_dir=str(run.dir)))  # the kind is not kept
    assert saved["loss_state"] == "nonfinite" and _loss(saved)[0]["text"] == "nan/inf"
    assert run_row(m.run_dir).last_loss == "nan/inf"
    assert ';color:#cf222e">nan/inf</td>' in RunsTable(rows=(run_row(m.run_dir),), more=0, root="")._repr_html_()


def test_a_diverged_loss_ends_with_a_status_that_says_so(run_root):
    m = _run(run_root, [2.0, 1.0, 30.0, 5473.0, 5473.0])
    m.finish("completed")
    state = build_state(facts_from_monitor(m.context))
    tile, chart = _loss(state)
    assert state["status"] == "completed" and state["loss_state"] == "diverged" and tile["alert"]
    assert chart["latest"]["train_loss"] == tile["value"]  # the legend's number is the tile's


def test_a_noisy_step_of_a_converged_run_is_not_called_diverged(run_root):
    m = _run(run_root, [4.0, 1.0, 0.01, 0.001, 0.05, 0.05])  # 50x its lowest, far under where it started
    m.finish("completed")
    assert build_state(facts_from_monitor(m.context))["loss_state"] is None


def test_a_finite_loss_has_no_alert_and_the_legend_reads_the_tiles_value(run_root):
    m = _run(run_root, [3.0, 2.0, 1.5, 1.2])
    state = build_state(facts_from_monitor(m.context))
    tile, chart = _loss(state)
    assert state["loss_state"] is None and "alert" not in tile
    assert chart["latest"] == {"train_loss": tile["value"]} and tile["value"] == 1.5
    m.finish("completed")
