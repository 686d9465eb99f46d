from __future__ import annotations

import re

from trainmeter.widget.look import label_charts, series_label


def test_known_series_get_human_labels_with_their_unit():
    assert series_label("recent_tokens_per_s") == "tokens/s, session (last 10 s, wall clock)"
    assert series_label("recent_tokens_per_s", "samples") == "samples/s, session (last 10 s, wall clock)"
    assert series_label("recent_train_tokens_per_s") == "tokens/s, training-only (same last 10 s)"
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


def test_only_gpu_index_dot_a_known_reading_gets_the_gpu_label():
    assert series_label("gpu12.tensor_activity") == "GPU 12 tensor activity (%)"
    assert series_label("gpu.util") == "gpu util"  # no index
    assert series_label("gpux.util") == "gpux util"
    assert series_label("gpu0.power_w") == "gpu0 power (W)"  # not one of the GPU wing's percentages
    assert series_label("gpu0.util.extra") == "gpu0 util extra"


def test_the_labels_module_compiles_no_pattern_at_import():
    import subprocess
    import sys

    code = ("import re, trainmeter.optim.smoothing; re.purge(); n = len(re._cache); "
            "import trainmeter.widget.look; print(len(re._cache) - n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"
