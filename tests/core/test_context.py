"""The run context: the one surface wings and sinks reach a run through (docs/contracts/EXTENSIONS.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.context import PUBLISHED, RunContext
from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contracts" / "EXTENSIONS.md"


class Handed(ExtensionBase):
    name = "handed"

    def __init__(self) -> None:
        self.got: object = None
        self.report: Report | None = None

    def start(self, monitor: RunContext) -> None:
        self.got = monitor

    def on_report(self, report: Report) -> None:
        self.report = report


def _run(tmp_path, *extensions):
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False, name="ctx")
    return make_monitor(options, clock=FakeClock(), text=False, probes=False, extensions=list(extensions))


def test_a_wing_is_handed_the_runs_context_never_the_monitor(tmp_path):
    wing = Handed()
    m = _run(tmp_path, wing).start()
    try:
        assert wing.got is m.context and isinstance(wing.got, RunContext)
        m.on_step(8)
        m.report_now()
        assert wing.report is not None and wing.report.token_unit == "tokens" and wing.report.interval is not None
    finally:
        m.finish("completed")


@pytest.mark.parametrize("name", ["dispatch", "registry", "lifecycle", "faults", "become_child", "on_step",
                                  "set_token_unit", "reporter", "_record"])
def test_the_context_refuses_every_member_it_does_not_publish(tmp_path, name):
    ctx = _run(tmp_path).context
    assert name not in PUBLISHED
    with pytest.raises(AttributeError):
        getattr(ctx, name)
    with pytest.raises(AttributeError):
        ctx.steps = 3  # type: ignore[misc]  # read-only: a wing writes no state of the run
    with pytest.raises(AttributeError):
        ctx.phases.pause_train()  # the phase clock read-only


def test_the_context_writes_provenance_and_warnings_only_through_its_methods(tmp_path):
    m = _run(tmp_path)
    ctx = m.context
    ctx.describe_series("acc", {"provenance": "measured", "source": "keras"}, replace=False)
    ctx.describe_series("acc", {"provenance": "estimated"}, replace=False)  # kept: one was there
    ctx.annotate_series("acc", "note", "one")
    ctx.annotate_series("acc", "note", "two")
    ctx.annotate_series("acc", "note", "two")  # once (a passport written again after a disk fault)
    ctx.annotate_series("nothing", "note", "dropped")  # no entry: nothing
    assert dict(ctx.series_info["acc"]) == {"provenance": "measured", "source": "keras", "note": "one; two"}
    assert "nothing" not in ctx.series_info
    with pytest.raises(TypeError):
        ctx.series_info["x"] = {}  # type: ignore[index]
    ctx.note_warning("a launch summary")
    assert ctx.warnings == ("a launch summary",) and m.warnings == ["a launch summary"]


def test_the_contract_lists_every_published_member():
    text = CONTRACT.read_text(encoding="utf-8")
    section = text[text.index("## The run context"):]
    named = set(re.findall(r"`([a-z_]+)", section))
    assert PUBLISHED - named == set()
