from __future__ import annotations

import math
import re
from html.parser import HTMLParser

from trainmeter.widget.frame import SeriesColumns
from trainmeter.widget.snapshot import format_value, render_snapshot


def _state(**extra):
    state = {
        "name": "gpt-small", "status": "completed", "elapsed_s": 754.2, "run_dir": ".trainmeter/runs/x",
        "text_line": "[step 5000] loss=2.1",
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
            {"id": "loss", "title": "loss", "x": "step", "unit": "", "series": ["train_loss", "val_loss"]},
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
        SeriesColumns(name="val_loss", x_kind="step", xs=xs[::100], ys=loss[::100]),
        SeriesColumns(name="train_tokens_per_s", x_kind="time", xs=times, ys=[1.2e5] * 200),
        SeriesColumns(name="session_tokens_per_s", x_kind="time", xs=times, ys=[9.8e4] * 200),
        SeriesColumns(name="rss_bytes", x_kind="time", xs=times, ys=[2e9 + i * 1e6 for i in range(200)]),
    ]


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.open = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_snapshot_has_tiles_charts_and_no_javascript_and_is_small():
    html = render_snapshot(_state(), _series())
    parser = _Tags()
    parser.feed(html)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "style" not in tags and not re.search(r"\son\w+=", html)
    assert tags.count("svg") == 3  # the chart with no data is left out
    assert len(html.encode()) < 30_000
    assert "trainmeter" in parser.tags[0][1]["class"]
    step = next(a for t, a in parser.tags if a.get("data-tm") == "step")
    assert step is not None and ">5,000<" in html
    assert 'data-tm="status"' in html and "completed" in html
    assert "125k/s" in html and "2.33 GiB" in html and "needs a loss" in html and "41.0%" in html


def test_user_text_is_escaped():
    html = render_snapshot(_state(), _series())
    assert "<script>" not in html and "&lt;script&gt;" in html and "MFU &lt;b&gt;" in html


def test_gaps_split_the_line_and_charts_keep_a_few_hundred_points():
    html = render_snapshot(_state(), _series(50_000))
    loss_svg = html[html.index("<svg"):html.index("</svg>")]
    polylines = re.findall(r'points="([^"]*)"', loss_svg)
    assert len(polylines) >= 3  # train_loss split at the NaN, plus val_loss
    assert sum(len(p.split()) for p in polylines) <= 2 * 240 + 2


def test_snapshot_without_series_or_progress_still_renders():
    html = render_snapshot({"name": "r", "status": "failed", "tiles": [], "charts": []}, [])
    assert "failed" in html and "<svg" not in html


def test_format_value_units():
    assert format_value(None, "bytes") == "-"
    assert format_value(3.5e9, "bytes") == "3.26 GiB"
    assert format_value(0.523, "fraction") == "52.3%"
    assert format_value(90.0, "s") == "1.5 min"
    assert format_value(1234567, "count") == "1.23M"
    assert format_value(5000, "count") == "5,000"
    assert format_value(math.nan, "") == "-"
    assert format_value("n/a", "") == "n/a"
