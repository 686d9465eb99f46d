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
