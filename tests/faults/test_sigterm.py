"""SIGTERM (docs/spec.md section 18): the passport is written (``terminated``) and the signal still does its job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning, active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def test_sigterm_with_a_program_handler_saves_a_passport_calls_it_and_the_run_goes_on(run_root):
    seen: list[int] = []

    def previous(signum, frame):  # a framework's graceful stop: sets a flag, the loop ends later
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, previous)
    try:
        m = make_monitor(make_options(run_dir=run_root, name="term"), clock=FakeClock(), text=False,
                         probes=False, extensions=[]).start()
        m.on_step(10)
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]  # the program's handler ran at once; the handler itself saved nothing
        assert not (m.run_dir / "passport.json").exists()
        with pytest.warns(MonitorWarning, match="SIGTERM at step 2"):
            m.on_step(10)  # the next step boundary is the safe point
        assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "terminated"
        assert active() is m and m.status == "running"
        m.on_step(10)
        m.finish("completed")
        passport = json.loads((m.run_dir / "passport.json").read_text())
        assert passport["status"] == "completed" and passport["steps"] == 3
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, old)


def test_an_ignored_sigterm_stays_ignored(run_root):
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        m = make_monitor(make_options(run_dir=run_root, name="term"), clock=FakeClock(), text=False,
                         probes=False, extensions=[]).start()
        signal.raise_signal(signal.SIGTERM)
        assert active() is m and not (m.run_dir / "passport.json").exists()
        m.finish("completed")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)


def test_the_handler_is_removed_at_finish_and_never_installed_off_the_main_thread(run_root):
    before = signal.getsignal(signal.SIGTERM)
    m = make_monitor(make_options(run_dir=run_root, name="term"), clock=FakeClock(), text=False,
                     probes=False, extensions=[]).start()
    assert signal.getsignal(signal.SIGTERM) is not before
    m.finish("completed")
    assert signal.getsignal(signal.SIGTERM) is before

    box = []
    t = threading.Thread(target=lambda: box.append(make_monitor(
        make_options(run_dir=run_root, name="thread"), text=False, probes=False, extensions=[]).start()))
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before
    box[0].finish("completed")


def test_a_process_killed_by_sigterm_dies_by_the_signal_and_leaves_its_passport(tmp_path: Path):
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parents[2] / 'src')!r})
        from trainmeter.extensions import make_monitor
        from trainmeter.options import make_options
        m = make_monitor(make_options(run_dir={str(tmp_path)!r}, name="killed"), text=False, probes=False,
                         extensions=[]).start()
        for _ in range(5):
            m.on_step(10)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            m.on_step(10)
        print("still alive")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "still alive" not in proc.stdout
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    passport = json.loads((run / "passport.json").read_text())
    assert passport["status"] == "terminated" and passport["steps"] == 6  # ended at the next step boundary
