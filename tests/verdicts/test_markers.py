from __future__ import annotations

from trainmeter.verdicts.markers import MAX_MARKERS, marker, markers
from trainmeter.verdicts.rules import KINDS


def test_each_verdict_kind_has_a_short_label_and_the_chart_whose_curve_shows_it():
    charts = {k: marker({"kind": k, "step": 3, "sentence": "s"})["chart"] for k in KINDS}
    assert charts["loss_nonfinite"] == charts["loss_spike"] == "loss"
    assert charts["memory_creep"] == "memory"
    assert {charts[k] for k in ("throughput_drop", "data_starved", "eval_heavy", "gpu_util_misleading")} == {
        "throughput"}
    assert all("_" not in marker({"kind": k, "step": 1})["label"] for k in KINDS)


def test_markers_keep_the_sentence_skip_verdicts_without_a_step_and_are_bounded():
    got = markers([{"kind": "loss_spike", "step": 40, "sentence": "loss jumped"}, {"kind": "x"}, "junk"])
    assert got == [{"kind": "loss_spike", "step": 40, "label": "loss spike", "sentence": "loss jumped",
                    "chart": "loss"}]
    assert len(markers([{"kind": "loss_spike", "step": i} for i in range(100)])) == MAX_MARKERS


def test_a_marker_that_names_its_own_label_and_chart_keeps_them():
    from trainmeter.verdicts.markers import marker

    got = marker({"kind": "alert", "step": 300, "label": "alert nan:stop", "sentence": "s", "chart": "loss"})
    assert got == {"kind": "alert", "step": 300, "label": "alert nan:stop", "sentence": "s", "chart": "loss"}
