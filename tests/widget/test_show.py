from __future__ import annotations

import importlib
import json

import pytest

from tests.fakes.gpu.fake import sampler_step
from tests.widget.wire_types import decode_frame
from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options

# the package's lazy ``display`` attribute is the function; the module is reached by name
display_module = importlib.import_module("trainmeter.widget.show")




def _saved_run(run_root, *, steps=50, finish=True):
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, name="saved", interval_s=1.0, budget_steps=100), clock=clock,
                text=False, probes=False)
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=1_500_000_000, rss_peak_bytes=1_600_000_000)
    for i in range(steps):
        clock.advance(0.1)
        m.on_step(64, loss_value=4.0 - i * 0.01)
        if i % 10 == 0:
            m.record({"val_loss": 3.5 - i * 0.01})
    if finish:
        m.finish("completed")
    return m


class ZMQInteractiveShell:
    pass


def _notebook(monkeypatch):
    import IPython.display

    shown = []

    def fake_display(data, metadata=None, raw=False, display_id=None):
        shown.append(data)

    monkeypatch.setattr(display_module, "ipython_shell", lambda: ZMQInteractiveShell())
    monkeypatch.setattr(IPython.display, "display", fake_display)
    return shown


def test_replay_builds_state_and_a_decimated_history_from_the_saved_run(run_root):
    m = _saved_run(run_root)
    state, columns, frame = display_module.replay(m.run_dir)
    assert state["name"] == "saved" and state["status"] == "completed" and state["run_dir"] == m.run_dir.name
    names = {c.name: c for c in columns}
    assert list(names["train_loss"].xs) == [float(s) for s in range(1, 51)]
    assert names["train_loss"].ys[0] == 4.0 and names["val_loss"].x_kind == "step"
    assert names["train_tokens_per_s"].x_kind == "time" and len(names["rss_bytes"].xs) == m.reports
    decoded = decode_frame(frame)
    assert [s.name for s in decoded.series] == [c.name for c in columns]
    json.dumps(state, allow_nan=False)


def test_replay_decimates_long_runs_and_honours_time_series_records(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    n = 100_000
    lines = [{"kind": "start", "name": "long", "options": {"interval_s": 10}},
             {"kind": "series", "name": "train_loss", "step": list(range(n)), "t_us": [0] * n,
              "value": [float(i % 97) for i in range(n)]},
             {"kind": "series", "name": "gpu0.util", "x": "time", "step": [1, 1], "t_us": [500000, 1500000],
              "value": [0.2, None]}]
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    state, columns, _ = display_module.replay(run_dir)
    by_name = {c.name: c for c in columns}
    assert len(by_name["train_loss"].xs) <= 2000 and max(by_name["train_loss"].ys) == 96.0
    assert by_name["gpu0.util"].x_kind == "time" and list(by_name["gpu0.util"].xs) == [0.5, 1.5]
    assert state["status"] == "unfinished" and any("no passport" in w for w in state["warnings"])


def test_display_of_a_saved_run_outside_ipython_prints_the_summary(run_root, capsys, monkeypatch):
    monkeypatch.setattr(display_module, "ipython_shell", lambda: None)
    m = _saved_run(run_root)
    capsys.readouterr()
    assert display_module.display(m.run_dir) is None
    out = capsys.readouterr().out
    assert out.startswith("trainmeter: saved [completed] [step 50]") and str(m.run_dir) in out


def test_display_of_a_missing_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        display_module.display(tmp_path / "nowhere")


def test_display_of_a_saved_run_shows_the_static_dashboard_that_the_live_model_mounts_into(run_root, monkeypatch):
    pytest.importorskip("anywidget")
    shown = _notebook(monkeypatch)
    m = _saved_run(run_root)
    display_module.display(m.run_dir)
    assert len(shown) == 1
    data = shown[0]
    # no widget view: a saved notebook would show "model not found" once the kernel is gone
    assert "application/vnd.jupyter.widget-view+json" not in data
    widget = display_module._REPLAYS[-1]
    assert f'data-tm-mount="{widget.store_key}"' in data["text/html"]
    assert "data:image/svg+xml;base64," in data["text/html"]
    assert data["text/plain"].startswith("trainmeter: saved [completed]")


def test_display_without_a_run_says_how_to_replay(monkeypatch, capsys):
    monkeypatch.setattr(display_module, "ipython_shell", lambda: None)
    import trainmeter.widget.attach as attach_module

    monkeypatch.setattr(attach_module, "live_publisher", lambda: None)
    display_module.display()
    assert "tm.display(path)" in capsys.readouterr().out


def test_display_without_argument_outside_notebook_prints_the_live_runs_line(run_root, monkeypatch, capsys):
    monkeypatch.setattr(display_module, "ipython_shell", lambda: None)
    import trainmeter.widget.attach as attach_module

    monkeypatch.setattr(attach_module, "live_publisher", lambda: None)
    _saved_run(run_root, finish=False)
    display_module.display()
    assert capsys.readouterr().out.startswith("trainmeter: saved [running] [step")


def test_display_without_argument_adds_a_view_of_the_live_widget(monkeypatch):
    shown = _notebook(monkeypatch)
    import trainmeter.widget.attach as attach_module

    class Live:
        running = True
        views = 0

        def show(self):
            self.views += 1

    live = Live()
    monkeypatch.setattr(attach_module, "live_publisher", lambda: live)
    display_module.display()
    assert live.views == 1 and shown == []


def test_tm_display_stays_callable_after_the_module_was_imported(monkeypatch, capsys):
    import trainmeter as tm

    monkeypatch.setattr(display_module, "ipython_shell", lambda: None)
    import trainmeter.widget.attach as attach_module

    monkeypatch.setattr(attach_module, "live_publisher", lambda: None)
    tm.display()
    assert "no run in progress" in capsys.readouterr().out


def test_replays_past_the_cap_are_closed_so_memory_stays_bounded(monkeypatch):
    closed = []

    class W:
        def close(self):
            closed.append(self)

    monkeypatch.setattr(display_module, "_REPLAYS", display_module.deque(maxlen=2))
    ws = [W(), W(), W()]
    for w in ws:
        display_module._keep(w)
    assert closed == [ws[0]] and list(display_module._REPLAYS) == ws[1:]


def test_replay_adds_the_panels_charts_and_tiles_the_live_view_had(run_root):
    from trainmeter.widget.view_model import save_dashboard

    m = _saved_run(run_root)
    live = {"tiles": [{"id": "step", "label": "step", "value": 1}, {"id": "mfu", "label": "MFU", "value": 0.4}],
            "charts": [{"id": "node_cpu", "title": "Node CPU", "x": "time", "unit": "fraction", "series": ["node.cpu"]}],
            "panels": [{"id": "node", "title": "Node", "rows": [{"label": "cpus", "value": 4, "unit": ""}]}]}
    save_dashboard(m.run_dir, live)
    state, _, _ = display_module.replay(m.run_dir)
    assert [t["id"] for t in state["tiles"]].count("step") == 1 and "mfu" in [t["id"] for t in state["tiles"]]
    assert "node_cpu" in [c["id"] for c in state["charts"]] and [p["id"] for p in state["panels"]] == ["node"]


def test_replay_without_a_saved_dashboard_is_the_passport_view(run_root):
    m = _saved_run(run_root)
    state, _, _ = display_module.replay(m.run_dir)
    assert state["panels"] == [] and state["status"] == "completed"


def test_replay_has_the_x_mappings_the_verdict_markers_and_the_energy_tile(run_root):
    m = _saved_run(run_root)
    passport_path = m.run_dir / "passport.json"
    passport = json.loads(passport_path.read_text())
    passport["verdicts"] = [{"kind": "loss_spike", "step": 30, "sentence": "the loss spiked at step 30"}]
    passport["energy"] = {"per": "token", "j_per_token": 0.25, "kwh": 0.001, "source": "NVML energy counter",
                          "avg_watts": {"0": 300.0}}
    passport.setdefault("derivations", []).append(
        {"name": "j_per_token", "formula": "joules / tokens", "value": 0.25, "unit": "J/token", "inputs": []})
    passport_path.write_text(json.dumps(passport))
    state, columns, _ = display_module.replay(m.run_dir)
    assert state["markers"] == [{"kind": "loss_spike", "step": 30, "label": "loss spike",
                                 "sentence": "the loss spiked at step 30", "chart": "loss",
                                 "at": {"tokens": 64 * 30, "time": pytest.approx(state["markers"][0]["at"]["time"])}}]
    assert 0 < state["markers"][0]["at"]["time"] <= state["elapsed_s"]  # on the time axis, mapped by Python
    assert "the loss spiked at step 30" in state["warnings"]
    energy = next(t for t in state["tiles"] if t["id"] == "energy")
    assert energy["text"] == "0.25 J/token" and energy["derivation"]["formula"] == "joules / tokens"
    loss = {c.name: c for c in columns}["train_loss"]
    tokens, times = loss.mapped["tokens"], loss.mapped["time"]
    mapped = [(x, k, t) for x, k, t in zip(loss.xs, tokens, times, strict=True) if t == t]  # NaN: past the last report
    assert len(mapped) > len(loss.xs) / 2 and all(k == 64 * x for x, k, _ in mapped)  # 64 tokens every step
    assert all(b[2] >= a[2] for a, b in zip(mapped, mapped[1:], strict=False))


def test_replay_shows_every_tile_chart_panel_and_marker_the_live_view_ended_with(run_root):
    from tests.energy.test_extension import StubGpu
    from trainmeter.energy.extension import EnergyExtension
    from trainmeter.timesplit.extension import TimeSplit
    from trainmeter.verdicts.extension import Verdicts
    from trainmeter.widget.view_model import build_state, facts_from_monitor, save_dashboard

    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["h100_sxm"])
    energy = EnergyExtension(powercap_root=run_root / "none")
    m = make_monitor(make_options(run_dir=run_root, name="full", interval_s=1.0), clock=clock, text=False,
                     probes=False, extensions=[gpu, energy, TimeSplit(), Verdicts()]).start()
    for i in range(120):
        clock.advance(0.25)
        sampler_step(gpu.sampler, clock())
        m.on_step(64, loss_value=(50.0 if 80 <= i < 83 else 2.0 + 0.001 * (i % 5)))
    m.finish("completed")
    live = build_state(facts_from_monitor(m.context))
    save_dashboard(m.run_dir, live)  # what the publisher writes at the cell's end
    state, columns, _ = display_module.replay(m.run_dir)
    for key in ("tiles", "charts", "panels"):
        assert {x["id"] for x in live[key]} <= {x["id"] for x in state[key]}, key
    assert [mk["kind"] for mk in live["markers"]] == ["loss_spike"]
    assert [{k: v for k, v in mk.items() if k != "at"} for mk in state["markers"]] == live["markers"]
    assert live["markers"][0]["sentence"] in state["warnings"]
    tile = {t["id"]: t for t in state["tiles"]}["energy"]
    assert tile["text"].endswith("J/token") and tile["derivation"]["name"] == "j_per_token"
    assert all(set(c.mapped) == {"step", "tokens", "time"} - {c.x_kind} for c in columns)  # every point on every axis
    assert all(set(c["labels"]) == {*c["series"], *(c.get("smoothed") or {}).values()} for c in state["charts"])


def test_a_script_run_without_a_widget_replays_its_panels_too(run_root):
    from tests.energy.test_extension import StubGpu
    from trainmeter.timesplit.extension import TimeSplit
    from trainmeter.widget.view_model import DASHBOARD_FILE

    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["h100_sxm"])
    m = make_monitor(make_options(run_dir=run_root, name="script", interval_s=1.0, widget=False), clock=clock,
                     text=False, probes=False, extensions=[gpu, TimeSplit()]).start()
    for i in range(40):
        clock.advance(0.25)
        sampler_step(gpu.sampler, clock())
        m.on_step(64, loss_value=2.0 - 0.01 * i)
    m.finish("completed")
    assert (m.run_dir / DASHBOARD_FILE).is_file()  # written at the passport, no publisher involved
    state, _, _ = display_module.replay(m.run_dir)
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    ended = build_state(facts_from_monitor(m.context))  # what a live view would have ended with
    assert ended["panels"], "the time split has a panel"
    for key in ("tiles", "charts", "panels"):
        assert {x["id"] for x in ended[key]} <= {x["id"] for x in state[key]}, key


def test_a_replay_draws_the_smoothed_loss_folded_over_every_recorded_step(run_root):
    from trainmeter.optim.smoothing import LossEma

    m = _saved_run(run_root)
    state, columns, _ = display_module.replay(m.run_dir)
    by_name = {c.name: c for c in columns}
    assert list(by_name["train_loss.ema"].xs) == list(by_name["train_loss"].xs)
    raw = by_name["train_loss"].ys
    assert list(by_name["train_loss.ema"].ys) == pytest.approx(LossEma().twin("train_loss", range(len(raw)), raw)[1])
    assert "val_loss.ema" not in by_name
    assert {c["id"]: c for c in state["charts"]}["loss"]["smoothed"] == {}  # 50 points: below MIN_POINTS, raw alone


def test_the_replay_draws_the_learning_rate_once_on_the_extensions_chart() -> None:
    from trainmeter.widget.show import with_live_extras

    state = {"charts": [{"id": "loss", "series": ["train_loss"]}, {"id": "series:lr", "series": ["lr"]},
                        {"id": "series:more", "series": ["lr", "other"]}]}
    saved = {"charts": [{"id": "lr", "title": "learning rate", "unit": "lr", "series": ["lr"], "log_y": True}]}
    charts = with_live_extras(state, saved)["charts"]
    assert [c["id"] for c in charts] == ["loss", "series:more", "lr"]
    assert next(c for c in charts if c["id"] == "series:more")["series"] == ["other"]
