"""Item 12: the smaller faults, one test each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import trainmeter.api as tm
from tests.fakes.runs import format_runs
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.magic import parse_flags
from trainmeter.options import make_options
from trainmeter.record.runs import load, runs


@pytest.mark.parametrize("name", ["run\n", "a\nb"])
def test_a_trailing_newline_is_not_a_valid_run_or_phase_name(name):
    with pytest.raises(ValueError, match="invalid run name"):
        make_options(name=name)
    with pytest.raises(ValueError, match="invalid phase name"):
        with tm.phase("eval\n"):
            pass


def test_dir_expands_the_home_folder_and_rejects_an_empty_value():
    assert make_options(run_dir="~/x").run_root == Path.home() / "x"
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="--dir"):
            make_options(run_dir=empty)
    with pytest.raises(UsageError, match="--dir"):
        parse_flags("--dir ''")


@pytest.mark.parametrize("peak", ["1e308", "1e7", "inf"])
def test_an_absurd_peak_is_rejected_before_the_run(peak):
    with pytest.raises(ValueError, match="--peak-tflops"):
        make_options(peak_tflops=peak, peak_source="datasheet")


def test_a_repeated_flag_is_an_error_naming_it():
    with pytest.raises(UsageError, match="--name given more than once"):
        parse_flags("--name a --name b")
    with pytest.raises(UsageError, match="--interval given more than once"):
        parse_flags("--interval=1 --interval 2")


@pytest.mark.parametrize("value", ["no", 0, None])
def test_tap_and_widget_take_booleans_only(value):
    with pytest.raises(ValueError, match="expected True or False"):
        make_options(tap=value)
    with pytest.raises(ValueError, match="expected True or False"):
        make_options(widget=value)


def test_runs_verb_with_an_unclosed_quote_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="cannot parse"):
        ip.run_line_magic("trainmeter", 'runs "x')
    with pytest.raises(UsageError, match="usage"):
        ip.run_line_magic("trainmeter", "runs --bogus")


def _finished_run(root: Path, name: str) -> Path:
    m = make_monitor(make_options(run_dir=root, name=name), clock=FakeClock(), text=False, probes=False,
                     extensions=[]).start()
    m.on_step(10)
    m.finish("completed")
    return m.run_dir


@pytest.mark.parametrize("damage", ["{not json", "[]", "\"x\"", ""])
def test_a_malformed_passport_never_breaks_runs_or_display(tmp_path, damage):
    from trainmeter.widget.show import replay

    good = _finished_run(tmp_path, "good")
    bad = _finished_run(tmp_path, "bad")
    (bad / "passport.json").write_text(damage)
    found = runs(tmp_path)
    assert [r.status for r in found] == ["completed", "completed"] or len(found) == 2
    bad_run = next(r for r in found if r.dir == bad)
    assert not bad_run.has_passport and "passport.json" in bad_run.passport["warnings"][0]
    assert "good" in format_runs(found) or str(good) in format_runs(found)
    assert bad_run.damaged and bad_run.status == "damaged"
    state, _, _ = replay(bad)
    assert state["status"] == "unfinished" and any("damaged" in w for w in state["warnings"])


def test_a_killed_run_reads_unfinished_with_its_last_step_and_unit_everywhere(tmp_path):
    from trainmeter.widget.show import replay

    m = make_monitor(make_options(run_dir=tmp_path, name="killed", interval_s=1.0), clock=(clock := FakeClock()),
                     text=False, probes=False, extensions=[]).start()
    m.set_token_unit("samples")
    for _ in range(159):
        clock.advance(0.5)
        m.on_step(4)
    m.record_sink._log.flush()  # what a SIGKILL leaves: the log up to the last report, no passport
    run_dir = m.run_dir
    m.record_sink._log.close()
    m.record_sink._log = None
    run = load(run_dir)
    assert run.status == "unfinished" and not run.has_passport
    assert run.passport["steps"] == 158 and run.passport["token_unit"] == "samples"
    line = format_runs([run])
    row = line.splitlines()[1]
    assert " 158 " in row and "632 samples" in row and "unfinished" in row
    state, _, _ = replay(run_dir)
    assert state["status"] == "unfinished"
    m.lifecycle._done.update({"passport", "log-close", "closing"})
    m.finish("completed")


def test_a_phase_never_exited_stops_holding_reports_after_ten_intervals(run_root):
    clock = FakeClock(100.0)
    m = make_monitor(make_options(run_dir=run_root, name="phase", interval_s=1.0), clock=clock, text=False,
                     probes=False, extensions=[]).start()
    m.enter_phase("eval")  # never exited
    with pytest.warns(MonitorWarning, match="phase 'eval' has been open"):
        for _ in range(100):
            clock.advance(1.0)
            m.on_step(1)
    assert m.reports >= 30  # held for the first 60 s, then one a second
    m.finish("completed")
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["phases_s"]["eval"] + passport["phases_s"]["reporting"] == pytest.approx(100.0)
