from __future__ import annotations

import re

from trainmeter.widget.labels import label_charts, series_label


def test_known_series_get_human_labels_with_their_unit():
    assert series_label("recent_tokens_per_s") == "tokens/s (last 10 s, wall clock)"
    assert series_label("recent_tokens_per_s", "samples") == "samples/s (last 10 s, wall clock)"
    assert series_label("rss_bytes") == "process RSS (bytes)"
    assert series_label("gpu1.sm_activity") == "GPU 1 SM activity (%)"
    assert series_label("lr/decay") == "learning rate, decay"


def test_unknown_series_become_words_with_the_unit_their_suffix_names():
    assert series_label("grad_scale_bytes") == "grad scale (bytes)"
    assert series_label("batches_per_s") == "batches per second"
    assert series_label("my.custom_metric") == "my custom metric"


def test_every_chart_gets_a_label_per_series_and_keeps_labels_it_has():
    charts = label_charts([{"id": "a", "series": ["train_loss", "node.cpu", "x_y"], "labels": {"x_y": "mine"}}, None])
    assert charts[0]["labels"] == {"train_loss": "train loss", "node.cpu": "node CPU (%)", "x_y": "mine"}
    assert charts[1] is None
    assert not any(re.search(r"[a-z]_[a-z]", v) for v in charts[0]["labels"].values() if v != "mine")
