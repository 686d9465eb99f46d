from __future__ import annotations

import base64
import math
import re
from html.parser import HTMLParser

from trainmeter.widget.frame import SeriesColumns
from trainmeter.widget.snapshot import chart_svg, format_tile, progress_text, render_snapshot, snapshot_bundle


def _state(**extra):
    state = {
        "name": "gpt-small", "status": "completed", "elapsed_s": 754.2, "run_dir": ".trainmeter/runs/x",
        "text_line": "[step 5000] loss=2.1", "step": 5000,
        "progress": {"fraction": 0.5, "eta_s": None, "pace": "training-only", "label": "5k / 10k steps"},
        "tiles": [
            {"id": "step", "label": "step", "value": 5000, "unit": "count"},
            {"id": "throughput", "label": "tok/s training-only", "value": 125_000.0, "unit": "tokens/s",
             "sub": "session 98.0k tok/s"},
            {"id": "loss", "label": "loss", "value": None, "unit": "", "missing": "a loss"},
            {"id": "rss", "label": "memory (RSS)", "value": 2.5e9, "unit": "bytes"},
        ],
        "phases_s": {"train": 600.0, "eval": 100.0, "checkpoint": 0.0, "reporting": 4.0},
        "charts": [
            {"id": "loss", "title": "loss", "x": "step", "unit": "", "series": ["train_loss", "val_loss"],
             "log_y": True},
            {"id": "throughput", "title": "throughput", "x": "time", "unit": "tokens/s",
             "series": ["train_tokens_per_s", "session_tokens_per_s"]},
            {"id": "memory", "title": "memory", "x": "time", "unit": "bytes", "series": ["rss_bytes"]},
            {"id": "empty", "title": "nothing yet", "x": "step", "unit": "", "series": ["absent"]},
        ],
        "panels": [{"id": "mfu", "title": "MFU <b>", "rows": [{"label": "mfu", "value": 0.41, "unit": "fraction"}]}],
        "warnings": ["peak FLOP/s unknown <script>"],
    }
    state.update(extra)
    return state


def _series(n=2000):
    xs = list(range(1, n + 1))
    loss = [3.0 * math.exp(-i / 500) + 0.01 * (i % 7) for i in xs]
    loss[100] = math.nan
    times = [i * 0.3 for i in range(200)]
    return [
        SeriesColumns(name="train_loss", x_kind="step", xs=xs, ys=loss),
        SeriesColumns(name="val_loss", x_kind="step", xs=[400.0], ys=[1.5]),
        SeriesColumns(name="train_tokens_per_s", x_kind="time", xs=times, ys=[1.2e5] * 200),
        SeriesColumns(name="session_tokens_per_s", x_kind="time", xs=times, ys=[9.8e4] * 200),
        SeriesColumns(name="rss_bytes", x_kind="time", xs=times, ys=[2e9 + i * 1e6 for i in range(200)]),
    ]


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _images(html):
    parser = _Tags()
    parser.feed(html)
    return [base64.b64decode(a["src"].split(",", 1)[1]).decode() for t, a in parser.tags
            if t == "img" and a["src"].startswith("data:image/svg+xml;base64,")]


def test_snapshot_is_tables_and_chart_images_without_javascript_or_inline_svg():
    html = render_snapshot(_state(), _series(), mount_key="abc")
    parser = _Tags()
    parser.feed(html)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "style" not in tags and "svg" not in tags and not re.search(r"\son\w+=", html)
    assert len(_images(html)) == 3  # the chart with no data is left out
    assert tags.count("table") >= 3  # header, tiles, charts: text stays laid out without CSS
    assert len(html.encode()) < 60_000
    assert parser.tags[0][1]["class"] == "trainmeter-snapshot" and parser.tags[0][1]["data-tm-mount"] == "abc"
    assert ">5,000<" in html and 'data-tm="status"' in html and "finished in 0:12:34" in html
    assert "125k tok/s" in html and "2.3 GiB" in html and "a loss" in html and "41.0%" in html


def test_tile_values_sit_in_their_own_cells_so_they_never_run_together():
    html = render_snapshot(_state(), _series())
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert "5,000" in cells and "125k tok/s" in cells and "2.3 GiB" in cells


def test_user_text_is_escaped():
    html = render_snapshot(_state(), _series())
    assert "<script>" not in html and "&lt;script&gt;" in html and "MFU &lt;b&gt;" in html


def test_charts_keep_a_few_hundred_points():
    loss_svg = _images(render_snapshot(_state(), _series(50_000)))[0]
    polylines = re.findall(r'points="([^"]*)"', loss_svg)
    assert sum(len(p.split()) for p in polylines) <= 2 * 240 + 2


def test_gaps_split_the_line():
    ys = [3.0, 2.5, 2.0, math.nan, 1.8, 1.7, 1.6] * 10
    svg = chart_svg({"id": "l", "x": "step", "unit": "", "series": ["l"]}, {"l": ("step", list(range(70)), ys)})
    assert len(re.findall(r"<polyline", svg)) == 11  # ten gaps


def test_a_single_val_loss_point_gets_a_marker():
    loss_svg = _images(render_snapshot(_state(), _series()))[0]
    assert loss_svg.count("<circle") == 1


def test_log_axis_labels_fall_inside_the_data():
    series = {"train_loss": ("step", [1.0, 2.0, 3.0, 4.0], [4.06, 3.0, 2.0, 1.2])}
    svg = chart_svg({"id": "loss", "x": "step", "unit": "", "series": ["train_loss"], "log_y": True}, series)
    labels = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    numeric = [float(x) for x in labels if re.fullmatch(r"[0-9.]+", x)]
    assert 4 <= len(numeric) <= 6 and all(1.2 <= v <= 4.06 for v in numeric), labels


def test_a_flat_series_gets_distinct_ticks():
    svg = chart_svg({"id": "t", "x": "time", "unit": "tokens/s", "series": ["r"]}, {"r": ("time", [1.0], [49_100.0])})
    labels = re.findall(r'text-anchor="end">([^<]+)</text>', svg)[:-1]
    assert len(labels) == len(set(labels)) >= 4, labels


def test_finished_runs_state_how_they_ended_and_never_an_eta():
    eta = {"fraction": 0.4, "eta_s": 29.0, "pace": "training-only", "label": "4 / 10 steps"}
    assert "finished in 0:00:28" in progress_text({"status": "completed", "elapsed_s": 28, "progress": eta})
    failed = progress_text({"status": "failed", "step": 300, "error": "ValueError: bad", "elapsed_s": 5})
    assert failed == "failed at step 300: ValueError: bad after 0:00:05"
    assert "ETA 0:00:29" in progress_text({"status": "running", "elapsed_s": 3, "progress": eta})


def test_snapshot_without_series_or_progress_still_renders():
    html = render_snapshot({"name": "r", "status": "failed", "tiles": [], "charts": []}, [])
    assert "failed" in html and "<img" not in html


def test_bundle_has_no_widget_view():
    bundle = snapshot_bundle(_state(), _series(), mount_key="k")
    assert set(bundle) == {"text/html", "text/plain"}


def test_format_tile_uses_the_shared_unit_formatters():
    assert format_tile({"id": "step", "value": 5000, "unit": "count"}) == "5,000"
    assert format_tile({"id": "rss", "value": 3.5e9, "unit": "bytes"}) == "3.3 GiB"
    assert format_tile({"id": "x", "value": None, "unit": "bytes"}) == "—"
    assert format_tile({"id": "x", "value": 1, "unit": "", "text": "n/a"}) == "n/a"


def test_absent_hardware_is_one_line_and_the_time_split_is_one_section():
    panels = [{"id": "gpu", "title": "GPU", "rows": [{"label": "util", "value": None, "unit": ""}],
               "note": "no NVIDIA GPU visible"},
              {"id": "time", "title": "Where the time goes", "rows": [{"label": "train", "value": 0.9,
                                                                        "unit": "fraction"}]}]
    html = render_snapshot(_state(panels=panels), _series())
    assert "<b" in html and "GPU</b> — no NVIDIA GPU visible" in html
    assert html.count("Where the time go") == 1 and "90.0%" in html


def test_a_verdict_marker_is_a_dashed_line_on_its_chart_and_a_note_under_it():
    marks = [{"kind": "loss_spike", "step": 1000, "label": "loss spike", "sentence": "loss 9x the median",
              "chart": "loss"},
             {"kind": "throughput_drop", "step": 100, "label": "throughput drop", "sentence": "slower",
              "chart": "throughput", "at": {"tokens": 6400.0, "time": 30.0}}]
    series = _series()
    svg = chart_svg(_state()["charts"][0], {s.name: (s.x_kind, s.xs, s.ys) for s in series}, marks)
    assert svg.count("data-tm-marker=") == 1 and 'data-tm-marker="loss_spike"' in svg and ">loss spike<" in svg
    tp = chart_svg(_state()["charts"][1], {s.name: (s.x_kind, s.xs, s.ys) for s in series}, marks)
    assert 'data-tm-marker="throughput_drop"' in tp  # step 100 placed at 30 s, mapped by Python (at.time)
    unplaced = chart_svg(_state()["charts"][1], {s.name: (s.x_kind, s.xs, s.ys) for s in series},
                         [{**marks[1], "at": {"tokens": None, "time": None}}])
    assert "data-tm-marker=" not in (unplaced or "")
    html = render_snapshot(_state(markers=marks), series)
    assert "loss spike at step 1,000: loss 9x the median" in html


def test_legends_print_the_human_labels():
    state = _state()
    state["charts"][0]["labels"] = {"train_loss": "train loss", "val_loss": "validation loss"}
    html = render_snapshot(state, _series())
    assert "validation loss" in html and "train_tokens_per_s" not in html and "tokens/s, training-only" in html


def test_the_footer_links_the_run_folder_relative_to_the_notebook_when_it_can():
    state = {"name": "r", "status": "completed", "run_dir": "/abs/nb/runs/x y", "run_rel": "runs/x y"}
    html = render_snapshot(state, [])
    assert 'href="runs/x%20y/passport.md"' in html and "/abs/nb" not in html


def test_a_run_outside_the_notebook_folder_is_named_without_a_link_that_would_leave_the_base_url():
    html = render_snapshot({"name": "r", "status": "completed", "run_dir": "/abs/elsewhere/x", "run_rel": None}, [])
    assert "full record in /abs/elsewhere/x" in html
    assert 'href="/abs' not in html  # an absolute path resolves against the server's root, not /user/<name>/


def test_a_run_in_a_hidden_folder_gets_no_link_jupyter_would_refuse():
    state = {"name": "r", "status": "completed", "run_dir": "/nb/.trainmeter/runs/x", "run_rel": ".trainmeter/runs/x"}
    html = render_snapshot(state, [])
    assert "full record in /nb/.trainmeter/runs/x" in html and "<a href" not in html


def test_the_training_loss_is_the_named_line_under_a_light_smoothed_band_in_the_live_palette():
    from trainmeter.widget.look import FAINT_ALPHA, PALETTE

    state = _state()
    state["charts"][0]["smoothed"] = {"train_loss": "train_loss.ema"}
    state["charts"][0]["labels"] = {"train_loss": "train loss", "train_loss.ema": "smoothed (EMA, ~50 steps)",
                                    "val_loss": "validation loss"}
    series = _series()
    series.append(SeriesColumns(name="train_loss.ema", x_kind="step", xs=series[0].xs, ys=[2.0] * 2000))
    svg = chart_svg(state["charts"][0], {s.name: (s.x_kind, s.xs, s.ys) for s in series})
    strokes = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]+)" stroke-width="([\d.]+)"', svg)
    assert (PALETTE[0] + FAINT_ALPHA, "4") in strokes and (PALETTE[0], "1.5") in strokes
    assert strokes.index((PALETTE[0], "1.5")) < strokes.index((PALETTE[0] + FAINT_ALPHA, "4"))  # the band on top
    html = render_snapshot(state, series)
    assert "</span> train loss &nbsp;" in html and "</span> smoothed (EMA, ~50 steps) &nbsp;" in html


def test_the_snapshot_has_the_live_charts_eight_colours_in_order():
    from trainmeter.widget.look import PALETTE

    assert PALETTE == ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
    svg = chart_svg(_state()["charts"][0], {s.name: (s.x_kind, s.xs, s.ys) for s in _series()})
    assert set(re.findall(r'(?:stroke|fill)="(#[0-9a-f]{6})"', svg)) >= set(PALETTE[:2])


def test_every_colour_of_the_static_views_is_read_from_the_one_colours_file():
    """widget/colours.json is the one place (js/src/protocol.ts bundles it too): the same hex values as before."""
    import json
    from pathlib import Path

    from trainmeter.widget import look

    colours = json.loads((Path(look.__file__).parent / "colours.json").read_text())
    assert (look.MUTED, look.INK, look.GRID, look.MARKER_COLOUR, look.WARNING_COLOUR) == (
        "var(--jp-ui-font-color2, #777)", "#888888", "#88888840", "#d1242f", "#b35c00") == (
        colours["muted"], colours["ink"], colours["grid"], colours["marker"], colours["warning_text"])
    assert look.STATUS_COLOURS == {"completed": "#1a7f37", "failed": "#cf222e", "interrupted": "#9a6700",
                                   "stopped": "#9a6700"}
    assert look.FIGURE_PALETTE[:2] == ("#1f77b4", "#ff7f0e") and len(look.FIGURE_PALETTE) == 10
    assert look.PHASE_COLOURS["train"] == look.PALETTE[0]
    html = render_snapshot({"name": "r", "status": "failed", "warnings": ["w"]}, [])
    assert 'color:#cf222e;font-weight:600">failed' in html and 'color:#b35c00;font-size:12px">&#9888; w' in html


def test_the_static_dashboard_says_who_stopped_the_run():
    from trainmeter.widget.snapshot import progress_text

    state = {"status": "stopped", "step": 448, "elapsed_s": 62, "controls": {"stopped": {"by": "button", "step": 448}}}
    assert progress_text(state) == "stopped by button at step 448 after 0:01:02"


def test_tiles_that_do_not_apply_on_this_machine_fold_into_one_line_in_the_snapshot():
    why = "the model is on the CPU: there is no dense datasheet peak to divide by"
    state = _state()
    state["tiles"] = [{"id": "step", "label": "step", "value": 3, "unit": "count"},
                      {"id": "mfu", "label": "MFU", "value": None, "unit": "fraction", "missing": why,
                       "not_here": True}]
    html = render_snapshot(state, {})
    assert f"Not on this machine: MFU: {why}" in html and ">MFU</th>" not in html and ">step</th>" in html


def test_a_share_is_drawn_on_its_whole_0_to_100_percent_scale():
    spec = {"id": "node_cpu", "title": "Node CPU", "x": "time", "unit": "fraction", "series": ["node.cpu"]}
    svg = chart_svg(spec, {"node.cpu": ("time", [0.0, 1.0, 2.0], [1.0, 0.995, 1.0])})
    assert svg is not None and ">0.0%<" in svg and ">100.0%<" in svg  # a 0.5% dip is not a cliff


def _y_labels(svg):
    return re.findall(r'text-anchor="end">([^<]+)</text>', svg)[:-1]  # the last is the x caption


def test_memory_is_drawn_from_0_to_the_device_total_as_live():
    spec = {"id": "memory", "x": "time", "unit": "bytes", "series": ["m"], "y_range": [0, 80 * 2**30]}
    svg = chart_svg(spec, {"m": ("time", [0.0, 1.0, 2.0], [30 * 2**30, 31 * 2**30, 32 * 2**30])})
    labels = _y_labels(svg)
    assert labels[0] == "0 B" and labels[-1].endswith("GiB") and float(labels[-1].split()[0]) >= 60, labels


def test_a_rate_axis_starts_at_0():
    spec = {"id": "throughput", "x": "time", "unit": "tokens/s", "series": ["r"], "y_range": [0, None]}
    svg = chart_svg(spec, {"r": ("time", [0.0, 1.0, 2.0], [40_000.0, 41_000.0, 42_000.0])})
    assert _y_labels(svg)[0].startswith("0"), _y_labels(svg)


def test_a_constant_lr_is_drawn_on_a_linear_axis_and_a_varying_one_on_its_log_axis():
    spec = {"id": "lr", "x": "step", "unit": "lr", "series": ["lr"], "log_y": True}
    assert "(log y)" not in chart_svg(spec, {"lr": ("step", [1.0, 2.0, 3.0], [3e-4] * 3)})
    assert "(log y)" in chart_svg(spec, {"lr": ("step", [1.0, 2.0, 3.0], [3e-4, 2e-4, 1e-4])})


def test_the_parent_runs_legend_entry_is_faint_as_its_line():
    from trainmeter.widget.snapshot import FAINT_ALPHA, PALETTE

    state = _state(charts=[{"id": "loss", "title": "loss", "x": "step", "unit": "",
                            "series": ["train_loss", "train_loss.parent"]}])
    series = [SeriesColumns(name="train_loss", x_kind="step", xs=[11.0, 12.0], ys=[1.0, 0.9]),
              SeriesColumns(name="train_loss.parent", x_kind="step", xs=[1.0, 10.0], ys=[2.0, 1.1])]
    html = render_snapshot(state, series)
    assert f'<span style="color:{PALETTE[0] + FAINT_ALPHA}">&#9632;</span>' in html
    assert f'<span style="color:{PALETTE[1]}">' not in html  # the parent takes the training loss's colour, faint
