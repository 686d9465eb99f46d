import dataclasses

import pytest

from trainmeter.widget.facts import RunFacts


def test_run_facts_annotations_are_evaluated_so_its_import_skips_the_string_checks():
    hints = {f.name: f.type for f in dataclasses.fields(RunFacts)}
    assert hints["steps"] is int and hints["name"] is str and not any(isinstance(t, str) for t in hints.values())


def test_run_facts_stays_a_frozen_keyword_only_record_with_fresh_defaults():
    a, b = RunFacts(name="a", status="running"), RunFacts(name="b", status="running")
    assert a.phases_s == {} and a.phases_s is not b.phases_s and a.steps == 0 and a.recent is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.steps = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunFacts("a", "running")  # type: ignore[misc]
