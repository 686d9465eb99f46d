from trainmeter.widget.look import linear_ticks, log_ticks


def test_linear_ticks_are_4_to_6_round_values_inside_the_data():
    assert linear_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert linear_ticks(2.13, 2.61) == [2.2, 2.3, 2.4, 2.5, 2.6]
    assert linear_ticks(1.1, 4.2) == [1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    assert linear_ticks(49000, 49100) == [49000.0, 49020.0, 49040.0, 49060.0, 49080.0, 49100.0]


def test_log_ticks_label_inside_the_data_not_only_powers_of_ten():
    assert log_ticks(1.2, 9.5) == [2.0, 3.0, 4.0, 5.0, 6.0, 8.0]
    assert log_ticks(0.05, 40) == [0.1, 0.3, 1.0, 3.0, 10.0, 30.0]
    assert log_ticks(2.13, 2.61) == [2.2, 2.3, 2.4, 2.5, 2.6]
    for lo, hi in ((0.3, 4.06), (1e-5, 1e5), (0.8, 12)):
        ticks = log_ticks(lo, hi)
        assert 4 <= len(ticks) <= 6 and all(lo <= t <= hi for t in ticks), (lo, hi, ticks)


def test_degenerate_ranges():
    assert linear_ticks(3, 3) == [3]
    assert log_ticks(0, 5) == [] and linear_ticks(float("nan"), 1) == []


def test_the_shared_tick_cases_are_what_the_rule_gives():
    import json
    from pathlib import Path

    from tests.fixtures.make_ticks_v1 import cases

    fixture = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "ticks_v1.json").read_text())
    assert fixture["cases"] == cases() and len(fixture["cases"]) > 20  # js/tests/ticks.test.ts runs the same


def test_the_rule_the_state_sends_is_the_one_these_functions_apply():
    from trainmeter.widget.look import LINEAR_STEPS, MAX_TICKS, MIN_TICKS, TICK_RULE

    assert TICK_RULE["max_ticks"] == MAX_TICKS == 6 and TICK_RULE["min_ticks"] == MIN_TICKS == 4
    assert TICK_RULE["linear_steps"] == list(LINEAR_STEPS) and TICK_RULE["log_steps"][0] == [1, 2, 3, 4, 5, 6, 8]
