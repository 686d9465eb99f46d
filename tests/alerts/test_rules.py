"""Alert rules: the --alert grammar, written back, and a clear error for every bad rule (docs/spec.md)."""

import pytest

from trainmeter.alerts.extension import AlertRule, parse_rule, parse_rules
from trainmeter.options import make_options


def test_each_condition_and_action_parses_and_is_written_back():
    assert parse_rule("nan:stop") == AlertRule("nan", "stop", text="nan:stop")
    assert parse_rule("spike") == AlertRule("spike", "show", text="spike:show")
    assert parse_rule("hang=120:notify").threshold == 120 and parse_rule("hang").threshold == 300
    assert parse_rule("memory=0.9:checkpoint-stop").threshold == 0.9
    r = parse_rule("val_loss>2.5:stop")
    assert (r.condition, r.series, r.above, r.threshold) == ("series", "val_loss", True, 2.5)
    assert r.text == "val_loss>2.5:stop"
    assert parse_rule("acc<0.1").above is False
    assert [x.text for x in parse_rules("nan:stop,throughput:notify, starved")] == [
        "nan:stop", "throughput:notify", "starved:show"]


@pytest.mark.parametrize("bad, words", [
    ("nan:explode", "unknown action 'explode'"),
    ("nope", "unknown condition 'nope'"),
    ("hang=1", "under 5 seconds"),
    ("hang=soon", "is not a finite number"),
    ("memory=1.5", "not a fraction"),
    ("val_loss>inf", "is not a finite number"),
    ("", "expected CONDITION[:ACTION]"),
])
def test_a_bad_rule_names_itself_and_what_is_valid(bad, words):
    with pytest.raises(ValueError) as caught:
        parse_rule(bad)
    assert words in str(caught.value) and "actions: show, notify, stop, checkpoint-stop" in str(caught.value)


def test_a_condition_given_twice_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        parse_rules("nan:stop,nan:show")


def test_the_option_validates_before_anything_runs():
    assert make_options(alert="nan:stop,hang=60").alerts == ("nan:stop", "hang=60:show")
    with pytest.raises(ValueError, match="invalid alert rule 'nan:boom'"):
        make_options(alert="nan:boom")
