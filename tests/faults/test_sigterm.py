"""Issue 10's SIGTERM item: the passport is written (status ``terminated``) and the signal still does its job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def test_sigterm_saves_the_passport_then_calls_the_previous_handler_and_restores_it(run_root):
    seen: list[int] = []

    def previous(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, previous)
    try:
        m = make_monitor(make_options(run_dir=run_root, name="term"), clock=FakeClock(), text=False,
                         probes=False, extensions=[]).start()
        m.on_step(10)
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
        assert active() is None
        assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "terminated"
        assert signal.getsignal(signal.SIGTERM) is previous
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
        print("still alive")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "still alive" not in proc.stdout
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    passport = json.loads((run / "passport.json").read_text())
    assert passport["status"] == "terminated" and passport["steps"] == 5
