"""Verdicts through a monitored run: fed at reports, said once on the text line, listed in the passport."""

from __future__ import annotations

import io
import json
import math
import threading

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.options import make_options
from trainmeter.verdicts.extension import Verdicts


def _run(tmp_path, loss, steps=200):
    clock, out = FakeClock(), io.StringIO()
    ext = Verdicts()
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=10), clock=clock, out=out, probes=False,
                     extensions=[ext]).start()
    for step in range(1, steps + 1):
        clock.advance(1.0)
        m.record({"train_loss": loss(step)}, step=step)
        m.on_step(1000)
    m.finish("completed")
    return ext, out.getvalue(), json.loads((m.run_dir / "passport.json").read_text())


def test_nan_loss_is_said_once_and_listed_in_the_passport(tmp_path) -> None:
    ext, text, passport = _run(tmp_path, lambda s: math.nan if s >= 150 else 2.0 - s / 1000)
    assert passport["verdicts"] == [{"kind": "loss_nonfinite", "step": 150, "sentence": ext.warnings()[0]}]
    assert text.count("trainmeter warning: train_loss became nan at step 150") == 1
    md = next(tmp_path.glob("*/passport.md")).read_text()
    assert "- Verdict: train_loss became nan at step 150" in md


def test_a_clean_run_has_an_empty_verdict_list(tmp_path) -> None:
    ext, text, passport = _run(tmp_path, lambda s: 2.0 - s / 1000)
    assert passport["verdicts"] == [] and ext.warnings() == [] and "warning" not in text


def test_the_reader_cursor_does_not_hold_back_trimming_of_other_series(tmp_path) -> None:
    clock = FakeClock()
    ext = Verdicts()
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=10), clock=clock, text=False, probes=False,
                     extensions=[ext]).start()
    for step in range(1, 101):
        clock.advance(1.0)
        m.record({"train_loss": 1.0, "lr": 0.1}, step=step)
        m.on_step(10)
    assert m.series["lr"].pending <= 10 and m.series["train_loss"].pending <= 10
    m.finish("completed")


def test_default_extensions_put_verdicts_last() -> None:
    assert default_extensions(make_options())[-1].name == "verdicts"


def _real_clock_run(tmp_path, ext, loss, steps=400, every=50):
    """A run on the real clock (a threaded report worker), a report forced every ``every`` steps."""
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), text=False, probes=False,
                     extensions=[ext]).start()
    for step in range(1, steps + 1):
        m.record({"train_loss": loss(step)}, step=step)
        m.on_step(1000)
        if step % every == 0:
            m.steps_state.next_report_s = 0.0
            m.maybe_report()
    m.finish("completed")
    return m, json.loads((m.run_dir / "passport.json").read_text())


def test_the_loss_rules_run_on_the_report_worker_not_the_training_thread(tmp_path, monkeypatch) -> None:
    from trainmeter.core.report_worker import THREAD_NAME
    from trainmeter.verdicts import rules

    threads: set[str] = set()
    add_loss = rules.VerdictEngine.add_loss

    def spy(self, *args):
        threads.add(threading.current_thread().name)
        return add_loss(self, *args)

    monkeypatch.setattr(rules.VerdictEngine, "add_loss", spy)
    ext = Verdicts()
    _, passport = _real_clock_run(tmp_path, ext, lambda s: math.nan if s >= 150 else 2.0 - s / 1000)
    assert threads == {THREAD_NAME}
    # the same verdict, step and sentence as when fed on the training thread (the fake-clock run above)
    assert passport["verdicts"] == [{"kind": "loss_nonfinite", "step": 150, "sentence": ext.warnings()[0]}]
    assert "became nan at step 150" in ext.warnings()[0]
