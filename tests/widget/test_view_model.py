from __future__ import annotations

import json

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.core.monitor import MonitorWarning
from trainmeter.core.throughput import interval_summary, session_summary
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runs import load
from trainmeter.widget.facts import RunFacts, report_points, report_points_from_record
from trainmeter.widget.view_model import build_state, facts_from_monitor, facts_from_run, progress, summary_text


class _Ext:
    name = "demo"

    def start(self, monitor):
        pass

    def stop(self):
        pass

    def panels(self):
        return [{"id": "mfu", "title": "MFU", "rows": [{"label": "mfu", "value": 0.4, "unit": "fraction"}]}]

    def charts(self):
        return [{"id": "gpu", "title": "GPU", "x": "time", "unit": "fraction", "series": ["gpu0.util"]}]

    def warnings(self):
        return ["demo warning"]


class _BrokenExt(_Ext):
    def panels(self):
        raise RuntimeError("boom")


def _run(run_root, clock, *, steps=6, extensions=None, **opts):
    m = make_monitor(make_options(run_dir=run_root, interval_s=2.0, name="vm", **opts), clock=clock, text=False,
                probes=False, extensions=extensions)
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=2_000_000_000, rss_peak_bytes=2_500_000_000)
    for i in range(steps):
        clock.advance(1.0)
        m.on_step(100, loss_value=3.0 - 0.1 * i)
        m.record({"lr": 0.1})
    return m


def _tile(state, tile_id):
    return next(t for t in state["tiles"] if t["id"] == tile_id)


def test_live_state_reads_every_number_from_the_monitor(run_root):
    clock = FakeClock(10.0)
    m = _run(run_root, clock, budget_steps=20)
    state = build_state(facts_from_monitor(m.context))
    assert state["name"] == "vm" and state["status"] == "running" and "run_path" not in state
    assert state["run_dir"] == m.run_dir.name  # outside the notebook's folder: its name, never an absolute path
    assert state["elapsed_s"] == pytest.approx(m.elapsed_s(), abs=0.05)
    assert state["text_line"] == m.text_line and state["text_line"].startswith("[step")
    assert _tile(state, "step")["value"] == 6 and _tile(state, "tokens")["value"] == 600
    rate = _tile(state, "throughput")
    assert rate["value"] == m.interval.train_tokens_per_s
    assert rate["unit"] == "tokens/s" and "session" in rate["sub"]
    assert rate["derivation"]["formula"] == "window_tokens / window_train_s"
    assert {i["name"] for i in rate["derivation"]["inputs"]} == {"window_tokens", "window_train_s"}
    # live, a step's captured loss shows once the next step began (a tm.emit right after it may replace it)
    assert _tile(state, "loss")["value"] == pytest.approx(2.6)
    assert _tile(state, "rss")["value"] == 2_000_000_000 and "2.3 GiB" in _tile(state, "rss")["sub"]
    assert state["phases_s"]["train"] > 0
    json.dumps(state, allow_nan=False)


def test_progress_uses_the_training_only_pace():
    def facts(**kw: object) -> RunFacts:
        return RunFacts(name="r", status="running", **kw)  # type: ignore[arg-type]

    p = progress(facts(steps=25, tokens=0, budget_steps=100, seconds_per_step=0.5))
    assert p == {"fraction": 0.25, "eta_s": 37.5, "pace": "training-only", "label": "25 / 100 steps"}
    p = progress(facts(steps=1, tokens=5_000, budget_tokens=20_000, train_tokens_per_s=1_000.0))
    assert p["fraction"] == 0.25 and p["eta_s"] == 15.0 and "tokens" in p["label"]
    assert progress(facts(steps=1, tokens=1, seconds_per_step=1.0, train_tokens_per_s=1.0)) is None
    done = progress(facts(steps=120, tokens=0, budget_steps=100))
    assert done["fraction"] == 1.0 and done["eta_s"] is None


def test_state_progress_comes_from_the_budget_and_the_last_window(run_root):
    clock = FakeClock(0.0)
    m = _run(run_root, clock, budget_steps=20)
    state = build_state(facts_from_monitor(m.context))
    assert state["progress"]["fraction"] == pytest.approx(6 / 20)
    assert state["progress"]["eta_s"] == pytest.approx(14 * m.interval.seconds_per_step)
    m.finish("completed")
    assert build_state(facts_from_monitor(_run(run_root, FakeClock(0.0), steps=2).context))["progress"] is None


def test_charts_put_losses_together_and_other_series_alone(run_root):
    m = _run(run_root, FakeClock(0.0))
    m.record({"val_loss": 2.0, "aux_loss": 0.1})
    charts = build_state(facts_from_monitor(m.context))["charts"]
    by_id = {c["id"]: c for c in charts}
    assert by_id["loss"]["series"][:2] == ["train_loss", "val_loss"] and "aux_loss" in by_id["loss"]["series"]
    assert by_id["series:lr"]["series"] == ["lr"] and by_id["series:lr"]["x"] == "step"
    assert by_id["throughput"] == {"id": "throughput", "title": "throughput (tokens/s)", "x": "time",
                                   "unit": "tokens/s", "series": ["train_tokens_per_s"],  # no widget measured
                                   "y_range": [0, None],  # from 0: rates are non-negative
                                   "labels": {"train_tokens_per_s": "tokens/s, training-only (per report window)"}}
    assert by_id["memory"]["series"] == ["rss_bytes", "cuda_allocated_bytes"] and by_id["memory"]["unit"] == "bytes"


@pytest.mark.monitor_warns("panels-demo failed and was disabled")  # the broken extension's fault
def test_extension_panels_charts_and_warnings_are_included_and_faults_are_skipped(run_root):
    m = _run(run_root, FakeClock(0.0), extensions=[_Ext(), _BrokenExt()])
    with pytest.warns(MonitorWarning):
        m.warn_once("x", "monitor warning")
    state = build_state(facts_from_monitor(m.context))
    assert [p["id"] for p in state["panels"]] == ["mfu"]
    assert state["charts"][-1]["id"] == "gpu"
    assert "monitor warning" in state["warnings"] and state["warnings"].count("demo warning") == 2


def test_missing_readings_are_null_with_what_would_enable_them(run_root):
    m = make_monitor(make_options(run_dir=run_root, name="empty"), clock=FakeClock(0.0), text=False, probes=False)
    state = build_state(facts_from_monitor(m.context))
    assert state["status"] == "starting" and state["run_dir"] is None
    assert _tile(state, "throughput")["value"] is None and "first report" in _tile(state, "throughput")["missing"]
    assert _tile(state, "loss")["value"] is None and "tm.emit" in _tile(state, "loss")["missing"]
    assert _tile(state, "rss")["value"] is None


def test_cuda_tile_appears_only_with_cuda_readings(run_root):
    m = _run(run_root, FakeClock(0.0))
    m.reporter.memory = MemoryReading(rss_bytes=1, rss_peak_bytes=1, cuda={"allocated_bytes": 3e9, "device_total_bytes": 80e9})
    tiles = build_state(facts_from_monitor(m.context))["tiles"]
    cuda = next(t for t in tiles if t["id"] == "cuda_memory")
    assert cuda["value"] == 3e9 and "74.5 GiB" in cuda["sub"]


def test_finished_run_shows_whole_run_rate_and_replay_matches_it(run_root):
    clock = FakeClock(0.0)
    m = _run(run_root, clock, budget_steps=10)
    m.finish("completed")
    live = build_state(facts_from_monitor(m.context))
    run = load(m.run_dir)
    replay = build_state(facts_from_run(run.passport, run.events(), run_dir=str(run.dir)))
    assert live["status"] == replay["status"] == "completed"
    assert _tile(live, "throughput")["value"] == run.passport["throughput"]["train_tokens_per_s"]
    assert _tile(replay, "throughput")["value"] == run.passport["throughput"]["train_tokens_per_s"]
    assert _tile(live, "throughput")["derivation"]["formula"] == "tokens / train_s"
    for key in ("step", "tokens", "loss", "rss"):
        assert _tile(live, key)["value"] == _tile(replay, key)["value"]
    assert live["elapsed_s"] == replay["elapsed_s"] == round(run.passport["elapsed_s"], 1)
    assert replay["progress"]["fraction"] == pytest.approx(0.6) and replay["progress"]["eta_s"] is None
    assert "series:lr" in {c["id"] for c in replay["charts"]}
    assert summary_text(replay).startswith("trainmeter: vm [completed] [step 6]")


def test_replay_without_a_passport_uses_the_last_report_and_says_so(run_root):
    m = _run(run_root, FakeClock(0.0))
    events = load(m.run_dir).events()
    state = build_state(facts_from_run({}, events, run_dir=str(m.run_dir)))
    assert state["status"] == "interrupted"
    assert _tile(state, "step")["value"] == events[-1]["step"]
    assert any("no passport" in w for w in state["warnings"])


def test_report_points_skip_missing_readings():
    interval = interval_summary(tokens=100, steps=1, train_s=0.5)
    session = session_summary(tokens=100, elapsed_s=2.0)
    points = report_points(interval, session, MemoryReading(rss_bytes=None, rss_peak_bytes=None))
    assert points == {"train_tokens_per_s": 200.0, "session_tokens_per_s": 50.0}
    t_s, values = report_points_from_record({"elapsed_s": 4.0, "throughput": {"train_tokens_per_s": 9.0},
                                             "memory": {"rss_bytes": 5, "cuda": {"allocated_bytes": 7}}})
    assert t_s == 4.0 and values == {"train_tokens_per_s": 9.0, "rss_bytes": 5.0, "cuda_allocated_bytes": 7.0}


def test_live_rate_tile_and_eta_follow_the_recent_figures_between_reports(run_root):
    from trainmeter.widget.live_rate import RecentFigures

    m = _run(run_root, FakeClock(0.0))
    m.lifecycle.status = "running"
    recent = RecentFigures(tokens_per_s=1234.0, steps_per_s=5.0, window_tokens=12340, window_steps=50,
                           window_s=10.0, t_s=12.0, rss_bytes=123 * 2**20)
    state = build_state(facts_from_monitor(m.context, recent=recent))
    rate = _tile(state, "throughput")
    assert rate["value"] == 1234.0 and rate["label"] == "session rate (last 10 s)"
    assert rate["derivation"]["formula"] == "window_tokens / window_s"
    assert _tile(state, "rss")["value"] == 123 * 2**20
    early = RecentFigures(tokens_per_s=1234.0, steps_per_s=5.0, window_tokens=300, window_s=0.4, window_steps=2,
                          t_s=0.4, rss_bytes=None)
    assert _tile(build_state(facts_from_monitor(m.context, recent=early)), "throughput")["label"] == \
        "session rate (first second)"


def test_the_live_rate_tile_names_one_window_for_the_session_and_the_training_only_rate(run_root):
    from trainmeter.widget.live_rate import RecentFigures

    m = _run(run_root, FakeClock(0.0))
    m.lifecycle.status = "running"
    recent = RecentFigures(tokens_per_s=5_100.0, steps_per_s=5.0, window_tokens=51_000, window_steps=50,
                           window_s=10.0, t_s=12.0, train_tokens_per_s=5_800.0, window_train_s=51_000 / 5_800)
    rate = _tile(build_state(facts_from_monitor(m.context, recent=recent)), "throughput")
    assert rate["label"] == "session rate (last 10 s)" and rate["value"] == 5_100.0
    assert rate["sub"] == "training-only 5.8k tok/s over the same last 10 s"  # never a second window
    assert [i["name"] for i in rate["derivation"]["inputs"]] == ["window_tokens", "window_s", "window_train_s"]


def test_the_live_eta_follows_the_recent_pace_labelled_so_when_the_compute_wing_builds_the_bar(run_root):
    from trainmeter.compute.extension import ComputeExtension
    from trainmeter.widget.live_rate import RecentFigures

    # 6 of 20 steps, 1 s each (training-only pace 1 step/s); the compute wing builds the bar
    m = _run(run_root, FakeClock(0.0), budget_steps=20, extensions=[ComputeExtension()])
    m.lifecycle.status = "running"
    recent = RecentFigures(tokens_per_s=50.0, steps_per_s=0.5, window_tokens=500, window_steps=5, window_s=10.0,
                           t_s=6.0, smoothed_steps_per_s=0.5, smoothed_tokens_per_s=50.0)
    bar = build_state(facts_from_monitor(m.context, recent=recent))["progress"]
    assert bar["pace"] == "recent" and bar["eta_s"] == pytest.approx(14 / 0.5)
    between = build_state(facts_from_monitor(m.context))["progress"]  # no recent figures yet: the report's pace
    assert between["pace"] == "training-only" and between["eta_s"] == pytest.approx(14 * m.interval.seconds_per_step)


def test_finished_runs_have_no_eta_even_from_an_extension_bar(run_root):
    m = _run(run_root, FakeClock(0.0))
    f = facts_from_monitor(m.context)
    bar = {"fraction": 0.5, "eta_s": 29.0, "pace": "training-only", "label": "x"}
    from dataclasses import replace

    state = build_state(replace(f, status="failed", progress_bar=bar))
    assert state["progress"]["eta_s"] is None


def test_a_nan_loss_becomes_a_marker_on_the_loss_chart_with_its_step_and_sentence(run_root):
    from trainmeter.verdicts.extension import Verdicts

    clock = FakeClock(0.0)
    m = _run(run_root, clock, steps=4, extensions=[Verdicts()])
    clock.advance(1.0)
    m.on_step(100, loss_value=float("nan"))
    for _ in range(4):
        clock.advance(1.0)
        m.on_step(100, loss_value=2.0)
    state = build_state(facts_from_monitor(m.context))
    marker = next(mk for mk in state["markers"] if mk["kind"] == "loss_nonfinite")
    assert marker["chart"] == "loss" and marker["step"] == 5 and marker["label"] == "loss NaN/inf"
    assert marker["sentence"] in state["warnings"]


def test_state_says_how_to_map_x_and_when_tokens_are_off(run_root):
    m = _run(run_root, FakeClock(0.0))
    from trainmeter.widget.x_axis import NO_STEP_YET, XMap

    x_map = XMap(open_end=True)
    assert build_state(facts_from_monitor(m.context, x_map=x_map))["x_axis"]["time_missing"] == NO_STEP_YET
    x_map.set_head(6, 600, 6.0)
    live = build_state(facts_from_monitor(m.context, x_map=x_map))
    assert live["x_axis"]["time_missing"] is None and "head" not in live["x_axis"]
    assert live["x_axis"]["tokens_missing"] is None
    m.finish("completed")
    no_tokens = _run(run_root, FakeClock(0.0), steps=0)
    assert "no tokens counted" in build_state(facts_from_monitor(no_tokens.context))["x_axis"]["tokens_missing"]


def test_the_phase_bar_has_each_phases_share_in_order_and_the_largest():
    from trainmeter.widget.view_model import phase_bar

    assert phase_bar({"train": 30.0, "eval": 10.0, "checkpoint": 0.0, "my_phase": 10.0}) == {
        "shares": {"train": 0.6, "eval": 0.2, "my_phase": 0.2}, "top": "train"}
    assert phase_bar({"train": 0.0}) == {"shares": {}, "top": None}
    assert phase_bar({"a": 1.0, "b": 2.0})["shares"] == {"a": 0.3333, "b": 0.6667}


def test_every_chart_series_has_a_human_label(run_root):
    m = _run(run_root, FakeClock(0.0), extensions=[_Ext()])
    for chart in build_state(facts_from_monitor(m.context))["charts"]:
        assert set(chart["labels"]) == {*chart["series"], *(chart.get("smoothed") or {}).values()}
        assert all("_" not in label for label in chart["labels"].values()), chart["labels"]


def test_only_the_training_loss_gets_a_smoothed_twin_labelled_with_its_window_in_steps(run_root):
    m = _run(run_root, FakeClock(0.0), steps=101, extensions=[_Ext()])  # 100 losses read (one a step behind)
    m.record({"val_loss": 2.0})
    charts = {c["id"]: c for c in build_state(facts_from_monitor(m.context))["charts"]}
    assert charts["loss"]["smoothed"] == {"train_loss": "train_loss.ema"}
    assert charts["loss"]["labels"]["train_loss.ema"] == "smoothed (EMA, ~5 steps)"  # 5% of the run so far
    assert all("smoothed" not in c for i, c in charts.items() if i != "loss")  # never lr, val_loss, rates


def test_a_training_loss_with_fewer_points_than_the_smoothings_minimum_is_drawn_raw_alone(run_root):
    from trainmeter.optim.smoothing import MIN_POINTS

    assert MIN_POINTS == 100
    m = _run(run_root, FakeClock(0.0), steps=MIN_POINTS - 1)
    loss = next(c for c in build_state(facts_from_monitor(m.context))["charts"] if c["id"] == "loss")
    assert loss["smoothed"] == {} and "train_loss.ema" not in loss["labels"]


def test_the_state_carries_the_look_both_front_ends_draw_with(run_root):
    from trainmeter.widget.look import MAIN_CHARTS, PALETTE, TICK_RULE

    look = build_state(facts_from_monitor(_run(run_root, FakeClock(0.0)).context))["look"]
    assert look["palette"] == list(PALETTE) and len(PALETTE) == 8 and PALETTE[0] == "#4e79a7"
    assert look["main_charts"] == list(MAIN_CHARTS) == ["loss", "throughput"] and look["merged_panels"] == ["time"]
    assert look["ticks"] == TICK_RULE and look["ticks"]["linear_steps"] == [1.0, 2.0, 5.0, 2.5]


def test_badges_only_on_values_and_a_derived_badge_follows_its_inputs(run_root):
    from trainmeter.widget.view_model import badge_tiles

    m = make_monitor(make_options(run_dir=run_root, name="empty"), clock=FakeClock(0.0), text=False, probes=False)
    state = build_state(facts_from_monitor(m.context))
    for tile in state["tiles"]:
        if tile["value"] is None and not tile.get("text"):
            assert "provenance" not in tile and tile["missing"], tile["id"]
    derived = {"id": "x", "label": "x", "value": 2.0, "unit": "", "provenance": "counted",
               "derivation": {"name": "x", "formula": "a * b", "value": 2.0, "unit": "", "missing": None,
                              "inputs": [{"name": "a", "value": 1.0, "unit": "", "provenance": "counted"},
                                         {"name": "b", "value": 2.0, "unit": "", "provenance": "assumed"}]}}
    (tile,) = badge_tiles([derived])
    assert tile["provenance"] == "assumed" and tile["derivation"]["provenance"] == "assumed"
    assert tile["derivation"]["provenance_note"] == "assumed: the weakest of its inputs (a counted, b assumed)"
    (blank,) = badge_tiles([{**derived, "value": None, "missing": None,
                             "derivation": {**derived["derivation"], "missing": "b: pass --b"}}])
    assert "provenance" not in blank and blank["missing"] == "b: pass --b"


def test_the_run_folder_is_relative_to_the_notebook_folder_when_inside_it(tmp_path):
    from trainmeter.widget.view_model import run_rel

    assert run_rel(str(tmp_path / ".trainmeter/runs/x"), str(tmp_path)) == ".trainmeter/runs/x"
    assert run_rel(str(tmp_path / "r"), str(tmp_path / "nb")) is None  # outside the notebook's folder
    assert run_rel(None) is None


def test_the_loss_reads_the_same_in_the_text_line_and_on_the_tile(run_root):
    from trainmeter.widget.snapshot import format_tile

    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=2.0, name="same"), clock=clock, text=False,
                     probes=False, extensions=[])
    m.start()
    for _ in range(3):
        clock.advance(1.0)
        m.on_step(100, loss_value=2.34567)
    state = build_state(facts_from_monitor(m.context))
    tile = format_tile(_tile(state, "loss"))
    assert tile == "2.346" and state["text_line"].split(" | ")[0].endswith(f" loss={tile}")


def test_a_progress_label_never_shows_the_same_count_twice_for_different_counts():
    def label(**kw):
        args = {"steps": 0, "tokens": 0, "budget_steps": None, "budget_tokens": None, "seconds_per_step": 1.0,
                "train_tokens_per_s": 1.0, **kw}
        return progress(RunFacts(name="r", status="running", **args))["label"]

    assert label(steps=1_100, budget_steps=1_150) == "1,100 / 1,150 steps"
    assert label(tokens=12_300, budget_tokens=12_345) == "12.30k / 12.35k tokens"
    assert label(tokens=500_000, budget_tokens=2_000_000) == "500k / 2.0M tokens"


def test_an_alerts_sentence_shows_in_the_banner_not_again_among_the_warnings():
    from trainmeter.widget.view_model import build_state

    alert = {"rule": "nan:stop", "action": "stop", "step": 3, "sentence": "alert nan:stop: the loss was nan",
             "notify": True}
    f = RunFacts(name="r", status="stopped", warnings=("alert nan:stop: the loss was nan", "a verdict"),
                 controls={"alerts": [alert], "live": False})
    state = build_state(f)
    assert state["warnings"] == ["a verdict"] and state["controls"]["alerts"] == [alert]


def test_a_finished_runs_text_line_says_the_passports_whole_run_rate_not_the_last_reports(run_root):
    import json

    clock = FakeClock(0.0)
    m = _run(run_root, clock)  # 6 steps of 1 s, reports every 2 s
    for _ in range(8):  # then 8 fast steps: the last report's rate is 4x the whole run's
        clock.advance(0.25)
        m.on_step(100, loss_value=2.0)
    assert "tok/s=400" in m.text_line
    m.finish("completed")
    f = facts_from_monitor(m.context)
    passport = json.loads((m.run_dir / "passport.json").read_text())
    whole = passport["throughput"]["train_tokens_per_s"]
    from trainmeter.sizes import format_rate

    assert f"tok/s={format_rate(whole, '')}" in f.text_line and f.train_tokens_per_s == pytest.approx(whole)
    assert f.text_line.startswith("[step 14] loss=2 | lr=1.00e-01 | train_tok/s=") and "mem=" in f.text_line


def test_what_a_saved_notebook_keeps_names_the_run_folder_relative_to_the_notebook_never_absolute(run_root,
                                                                                                     monkeypatch):
    from trainmeter.widget.snapshot import snapshot_bundle

    m = _run(run_root, FakeClock(0.0))
    m.finish("completed")
    monkeypatch.chdir(run_root.parent)  # the notebook's folder holds runs/
    state = build_state(facts_from_monitor(m.context))
    assert state["run_dir"] == state["run_rel"] == f"runs/{m.run_dir.name}"
    bundle = snapshot_bundle(state, [])
    (run_root.parent / "notebooks").mkdir()
    monkeypatch.chdir(run_root.parent / "notebooks")  # the run outside the notebook's folder: its name only
    outside = snapshot_bundle(build_state(facts_from_monitor(m.context)), [])
    for saved in (bundle, outside):
        assert str(run_root.parent) not in saved["text/html"] + saved["text/plain"]
    assert f"run folder {m.run_dir.name}" in outside["text/plain"]


def test_a_live_runs_memory_tile_before_its_first_reading_waits_for_the_report_and_asks_for_no_install(run_root):
    pytest.importorskip("psutil")
    m = _run(run_root, FakeClock(0.0), steps=0)  # the first frame: nothing read yet
    rss = _tile(build_state(facts_from_monitor(m.context)), "rss")
    assert rss["value"] is None and rss["missing"] == "the first report (every 2 s)", rss
