"""An ``os.fork`` child that trains and leaves by ``os._exit`` is recorded from its log (docs/spec.md section 19)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainmeter.record.events import read_events

SRC = str(Path(__file__).parents[2] / "src")


@pytest.mark.slow
def test_a_child_that_ends_by_os_exit_within_one_interval_keeps_its_steps_on_disk(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {SRC!r})
        import trainmeter as tm
        with tm.monitor(run_dir=sys.argv[1], name="fx", interval_s=30) as m:
            pid = os.fork()
            if pid == 0:
                t0 = time.monotonic()
                while time.monotonic() - t0 < 2.5:
                    m.on_step(10)
                    time.sleep(0.01)
                os._exit(0)  # no finalizer, no atexit: only what is on disk remains
            os.waitpid(pid, 0)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (seat,) = tmp_path.glob("*/proc-*")
    intervals = read_events(seat / "events.jsonl", kinds=("interval",))
    assert intervals and intervals[-1]["step"] >= 50  # steps up to its last report, well within the 30 s interval
