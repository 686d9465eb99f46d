from __future__ import annotations

import math

from trainmeter.widget.x_axis import NO_STEP_YET, TIME_LABEL, XMap, place_markers, x_axis_state


def _nan_none(column):
    return [None if math.isnan(v) else v for v in column]


def _saved(points):
    """A saved run's map from ``(step, seconds, tokens)`` report points (as a replay adds them)."""
    m = XMap()
    for step, t_s, tokens in points:
        m.add(step, tokens, t_s)
    return m


def test_a_saved_runs_map_starts_at_the_implied_origin_and_stops_at_its_last_point():
    m = _saved([(10, 2.0, 100.0), (20, 4.0, 300.0)])
    cols = m.columns("step", [5, 15, 20, 21, -1])
    assert _nan_none(cols["tokens"]) == [50.0, 200.0, 300.0, None, None]
    assert _nan_none(cols["time"]) == [1.0, 3.0, 4.0, None, None]
    back = m.columns("time", [1.0, 3.0, 4.0, 4.5])
    assert _nan_none(back["step"]) == [5.0, 15.0, 20.0, None] and _nan_none(back["tokens"])[:3] == [50.0, 200.0, 300.0]
    assert _nan_none(XMap().columns("step", [1])["tokens"]) == [None] and XMap().empty


def test_a_live_map_takes_its_head_and_maps_past_it():
    m = XMap(open_end=True)
    m.add(10, 640, 1.0)
    m.set_head(15, 960, 1.5)
    assert not m.empty and m.point(12.5) == {"tokens": 800.0, "time": 1.25}
    assert m.point(20) == {"tokens": 1280.0, "time": 2.0}  # a step past the head: along the last segment
    assert m.columns("time", [2.5, 0.5]) == {"step": [15.0, 5.0], "tokens": [960.0, 320.0]}  # past the head: its step
    m.add(20, 1280, 2.0)  # a kept point past the head replaces it
    assert m.columns("step", [20]) == {"tokens": [1280.0], "time": [2.0]}


def test_a_map_keeps_a_bounded_number_of_points_and_its_newest():
    m = XMap(max_points=8)
    for step in range(1, 100):
        m.add(step, 10 * step, step / 10)
    assert len(m.steps) <= 8 and m.steps[0] == 0.0 and m.steps[-1] == 99.0
    at = m.point(50)  # steady tokens per step: still exact between points
    assert math.isclose(at["tokens"], 500.0) and math.isclose(at["time"], 5.0)


def test_markers_get_their_step_on_the_other_axes():
    m = _saved([(10, 2.0, 100.0)])
    marker = {"kind": "loss_spike", "step": 5, "label": "spike", "sentence": "s", "chart": "loss"}
    assert place_markers([marker], m)[0]["at"] == {"tokens": 50.0, "time": 1.0}
    assert place_markers([{**marker, "step": 11}], m)[0]["at"] == {"tokens": None, "time": None}
    assert place_markers([marker], None) == [marker]


def test_tokens_axis_is_off_with_the_reason_until_tokens_are_counted_and_time_until_a_step():
    off = x_axis_state(tokens=0, token_unit="samples", mapped=False)
    assert off["tokens_missing"].startswith("no samples counted yet") and off["tokens_label"] == "samples (cumulative)"
    assert off["time_missing"] == NO_STEP_YET
    on = x_axis_state(tokens=640, token_unit="tokens", mapped=True)
    assert on["tokens_missing"] is None and on["time_label"] == TIME_LABEL and on["time_missing"] is None


def test_a_report_adds_a_mapping_point_only_past_the_last_step():
    from trainmeter.widget.x_axis import report_mapping

    record = {"kind": "interval", "step": 40, "tokens": 2560, "elapsed_s": 4.5}
    assert report_mapping(record, 0) == (40, 4.5, 2560.0)
    assert report_mapping(record, 40) is None
    assert report_mapping({**record, "tokens": None}, 10) == (40, 4.5, None)
    assert report_mapping({"step": 0, "elapsed_s": 0.1}, 0) is None
