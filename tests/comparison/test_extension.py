"""The curves recorder writes curves.json at the end and never holds back series trimming."""

from __future__ import annotations

import json

from trainmeter.comparison.extension import CurvesRecorder
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.options import make_options


def test_curves_json_has_losses_and_one_row_per_report(tmp_path) -> None:
    clock = FakeClock()
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=10), clock=clock, text=False, probes=False,
                     extensions=[CurvesRecorder()]).start()
    for step in range(1, 101):
        clock.advance(1.0)
        m.record({"train_loss": 1.0 / step, "grad_norm": 1.0}, step=step)
        m.on_step(64)
    assert m.series["grad_norm"].pending <= 10
    m.finish("completed")
    doc = json.loads((m.run_dir / "curves.json").read_text())
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert doc["series"]["train_loss"]["count"] == 100 and doc["series"]["train_loss"]["step"][-1] == 100
    assert doc["reports"]["step"][-1] == 100 and doc["reports"]["tokens"][-1] == 6400
    assert len(doc["reports"]["step"]) == m.reports
    assert passport["curves"]["file"] == "curves.json" and passport["curves"]["points"]["train_loss"] == 100


def test_default_extensions_record_curves() -> None:
    assert "curves" in [e.name for e in default_extensions(make_options())]


def test_import_trainmeter_stays_free_of_bqplot_pandas_and_torch() -> None:
    import subprocess
    import sys

    code = "import sys, trainmeter; print(sorted(m for m in ('bqplot', 'pandas', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_decimation_runs_on_the_report_worker_and_the_curves_match_a_fed_in_place_run(tmp_path, monkeypatch) -> None:
    import threading

    from trainmeter.core import decimate
    from trainmeter.core.report_worker import THREAD_NAME

    threads: set[str] = set()
    extend = decimate.Decimator.extend

    def spy(self, xs, ys):
        threads.add(threading.current_thread().name)
        return extend(self, xs, ys)

    monkeypatch.setattr(decimate.Decimator, "extend", spy)

    def run(root, clock):
        m = make_monitor(make_options(run_dir=root, interval_s=3600), clock=clock, text=False, probes=False,
                         extensions=[CurvesRecorder()]).start()
        for step in range(1, 5001):
            m.record({"train_loss": (step * 7919 % 1000) / 1000.0}, step=step)
            m.on_step(64)
            if step % 500 == 0:
                m.steps_state.next_report_s = float("-inf")
                m.maybe_report()
        m.finish("completed")
        return json.loads((m.run_dir / "curves.json").read_text())

    threaded = run(tmp_path / "a", None)
    assert threads == {THREAD_NAME}
    threads.clear()
    in_place = run(tmp_path / "b", FakeClock())
    assert threads == {"MainThread"}
    assert threaded["series"] == in_place["series"] and threaded["reports"]["step"] == in_place["reports"]["step"]
    assert threaded["series"]["train_loss"]["count"] == 5000
