from __future__ import annotations

from trainmeter.widget.x_axis import TIME_LABEL, interpolate, x_axis_state


def test_interpolation_starts_at_the_implied_origin_and_stops_at_the_last_point():
    assert interpolate([10, 20], [100.0, 300.0], 5) == 50.0
    assert interpolate([10, 20], [100.0, 300.0], 15) == 200.0
    assert interpolate([10, 20], [100.0, 300.0], 20) == 300.0
    assert interpolate([10, 20], [100.0, 300.0], 21) is None
    assert interpolate([], [], 1) is None


def test_tokens_axis_is_off_with_the_reason_until_tokens_are_counted():
    off = x_axis_state(tokens=0, token_unit="samples", head=None)
    assert off["tokens_missing"].startswith("no samples counted yet") and off["tokens_label"] == "samples (cumulative)"
    on = x_axis_state(tokens=640, token_unit="tokens", head=(10, 640, 2.5))
    assert on["tokens_missing"] is None and on["time_label"] == TIME_LABEL
    assert on["head"] == {"step": 10, "tokens": 640, "t_s": 2.5}


def test_a_report_adds_a_mapping_point_only_past_the_last_step():
    from trainmeter.widget.x_axis import report_mapping

    record = {"kind": "interval", "step": 40, "tokens": 2560, "elapsed_s": 4.5}
    assert report_mapping(record, 0) == (40, 4.5, 2560.0)
    assert report_mapping(record, 40) is None
    assert report_mapping({**record, "tokens": None}, 10) == (40, 4.5, None)
    assert report_mapping({"step": 0, "elapsed_s": 0.1}, 0) is None
