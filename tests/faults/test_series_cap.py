"""Item 7: the number of series is capped (a warning names the dropped) and names print escaped."""

from __future__ import annotations

import io
import json

import pytest

import trainmeter.api as tm
from tests.fakes.runs import format_runs
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runs import runs


def _monitor(run_root, clock, **options):
    out = io.StringIO()
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="cap", **options), clock=clock,
                     text=True, probes=False, extensions=[], out=out)
    return m, out


def test_ten_thousand_names_keep_the_default_cap_and_the_passport_names_the_dropped(run_root):
    clock = FakeClock(100.0)
    m, out = _monitor(run_root, clock)
    m.start()
    with pytest.warns(MonitorWarning, match="more than 256 series") as caught:
        for i in range(10_000):
            tm.emit(**{f"s{i}": 1.0})
            if i % 1000 == 0:
                clock.advance(1.0)
                m.on_step(1)
        m.finish("completed")
    assert len(m.series) == 256
    assert sum("more than 256 series" in str(w.message) for w in caught) == 1
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["series_dropped"]["count"] == 10_000 - 256
    assert passport["series_dropped"]["names"][0] == "s256" and len(passport["series_dropped"]["names"]) == 20
    assert max(len(line) for line in out.getvalue().splitlines()) < 600  # a text line stays a line


def test_the_cap_is_an_option(run_root):
    m, _ = _monitor(run_root, FakeClock(), max_series=3)
    m.start()
    with pytest.warns(MonitorWarning, match="more than 3 series"):
        tm.emit(a=1.0, b=2.0, c=3.0, d=4.0)
    tm.emit(a=5.0, d=6.0)  # an existing name still records; a dropped one is counted once
    m.finish("completed")
    assert sorted(m.series) == ["a", "b", "c"] and m.series["a"].stats().count == 2
    assert m.series_dropped == 1 and m.series_dropped_names == ["d"]


def test_control_characters_in_names_are_escaped_in_the_text_line_and_warnings(run_root):
    clock = FakeClock(100.0)
    m, out = _monitor(run_root, clock)
    m.start()
    tm.emit(**{"evil\n[step 999] loss=0.0\x1b[2J": 1.0})
    clock.advance(1.0)
    m.on_step(1)
    m.finish("completed")
    text = out.getvalue()
    assert "\x1b" not in text and "\n[step 999]" not in text
    assert "evil\\n[step 999] loss=0.0\\x1b[2J=1" in text


def test_the_runs_table_escapes_control_characters(tmp_path):
    run = tmp_path / "20260101T000000Z-x\x1b[31m"
    run.mkdir()
    (run / "passport.json").write_text(json.dumps({"name": "x", "status": "completed\n\x1b[2J", "steps": 1}))
    table = format_runs(runs(tmp_path))
    assert "\x1b" not in table and len(table.splitlines()) == 2  # the header and one row


@pytest.mark.slow
def test_at_the_highest_cap_the_widget_history_and_state_keep_their_budgets(run_root):
    """100,000 series (``--max-series 100000``): the history frame stays within 192 KB and the state within 500 KB;
    the charts draw the first ones and their titles count the rest and say where they are (docs/spec.md section 18)."""
    from tests.widget.test_publisher import Recorder
    from trainmeter.widget.feed import MAX_SERIES_SENT
    from trainmeter.widget.publisher import Publisher
    from trainmeter.widget.show import replay

    clock = FakeClock(0.0)
    m, _ = _monitor(run_root, clock, max_series=100_000)
    m.start()
    names = [f"s{i}" for i in range(100_000)]
    m.registry.create(names)  # made at once (creation cost is not this test's)
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock, state_interval_s=0.0)
    values = dict.fromkeys(names, 1.0)
    for _ in range(3):
        m.on_step(128, loss_value=1.0)
        tm.emit(**values)
        clock.advance(0.5)
        pub.tick()
    clock.advance(6.0)
    pub.request_snapshot()  # a page's hello: the whole history and state
    pub.tick()
    history = [n for k, n in w.frames if k == "snapshot"]
    assert history and max(history) <= 192 * 1024, max(history)
    state = json.dumps(w.view)
    assert len(state) <= 500 * 1024, len(state)
    more = next(c for c in w.view["charts"] if c["id"] == "series:more")
    assert len(more["series"]) == 24 and "24 of 99,992 drawn" in more["title"] and "to_pandas" in more["title"]
    assert len(w.store) <= MAX_SERIES_SENT and "train_loss" in w.store and "s0" in w.store
    m.finish("completed")
    state, columns, frame = replay(m.run_dir)
    assert len(columns) <= MAX_SERIES_SENT and len(frame) <= 192 * 1024 and len(json.dumps(state)) <= 500 * 1024


@pytest.mark.slow
def test_long_names_and_long_histories_keep_the_history_frame_in_budget(run_root):
    """400 series of 80-character names, 1,500 steps each: the headers count against the 192 KB too."""
    from tests.widget.test_publisher import Recorder
    from trainmeter.widget.publisher import Publisher

    clock = FakeClock(0.0)
    m, _ = _monitor(run_root, clock, max_series=1000)
    m.start()
    w = Recorder(clock)
    pub = Publisher(m.context, w, clock=clock, state_interval_s=0.0)
    names = [f"{i:04d}" + "x" * 76 for i in range(400)]
    for step in range(1500):
        m.on_step(128, loss_value=1.0)
        tm.emit(**dict.fromkeys(names, float(step)))
        if step % 100 == 0:
            clock.advance(0.5)
            pub.tick()
    clock.advance(6.0)
    pub.request_snapshot()
    pub.tick()
    history = [n for k, n in w.frames if k == "snapshot"]
    assert history and max(history) <= 192 * 1024, max(history)
    assert "train_loss" in w.store
    m.finish("completed")
