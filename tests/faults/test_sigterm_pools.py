"""Process pools and forked children inside a monitored run end as they do bare (docs/spec.md section 18).

Each case runs a script under ``tm.monitor()`` in a subprocess, so a hang is caught by the subprocess timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).parents[2] / "src")
TRIALS = 20


def _run(tmp_path: Path, body: str, *, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {SRC!r})
        import concurrent.futures, multiprocessing, os, time
        import trainmeter as tm

        def square(x):
            return x * x

        if __name__ == "__main__":
    """) + textwrap.indent(textwrap.dedent(body), "    "), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=timeout_s, env=env, cwd=tmp_path)


@pytest.mark.slow
def test_fork_pools_and_process_pool_executors_inside_a_run_never_hang(tmp_path):
    proc = _run(tmp_path, f"""
        with tm.monitor(run_dir=sys.argv[1], name="pools", interval_s=0.1) as m:
            fork = multiprocessing.get_context("fork")
            for trial in range({TRIALS}):
                with fork.Pool(3) as pool:
                    assert pool.map(square, range(12)) == [x * x for x in range(12)]
                with concurrent.futures.ProcessPoolExecutor(2, mp_context=fork) as ex:
                    assert list(ex.map(square, range(6))) == [x * x for x in range(6)]
                m.on_step(10)
            with fork.Pool(2, maxtasksperchild=1) as pool:  # workers forked again from the pool's own thread
                assert pool.map(square, range(6)) == [x * x for x in range(6)]
            for name in ("forkserver", "spawn"):
                with multiprocessing.get_context(name).Pool(2) as pool:
                    assert pool.map(square, range(4)) == [0, 1, 4, 9]
        print("ended", m.status)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ended completed" in proc.stdout


@pytest.mark.slow
def test_a_child_forked_just_after_the_start_ends(tmp_path):
    proc = _run(tmp_path, """
        codes = []
        for trial in range(6):
            with tm.monitor(run_dir=sys.argv[1], name=f"forked{trial}") as m:
                pid = os.fork()
                if pid == 0:
                    for _ in range(3):
                        m.on_step(10)
                    sys.exit(0)
                codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print("codes", codes)
    """, timeout_s=90.0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "codes [0, 0, 0, 0, 0, 0]" in proc.stdout


@pytest.mark.slow
def test_dataloader_workers_inside_a_run_end(tmp_path):
    pytest.importorskip("torch")
    proc = _run(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        data = TensorDataset(torch.arange(64.0).reshape(32, 2))
        with tm.monitor(run_dir=sys.argv[1], name="loader") as m:
            for epoch in range(3):
                for (batch,) in DataLoader(data, batch_size=4, num_workers=2):
                    m.on_step(4)
        print("ended", m.status, m.steps)
    """, timeout_s=180.0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ended completed 24" in proc.stdout


BLOCKED = """
    import ctypes, threading
    with tm.monitor(run_dir=sys.argv[1], name="blocked") as m:
        m.on_step(10)
        print("ready", flush=True)
        if sys.argv[2] == "c":  # blocked in C, where no Python handler runs (a native lock)
            libc = ctypes.CDLL(None)
            mutex = ctypes.create_string_buffer(64)
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)
        elif sys.argv[2] == "sleep":  # no step comes, and an event loop took the wakeup descriptor away
            import signal, time
            signal.set_wakeup_fd(-1)
            time.sleep(600)
        else:
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["c", "python", "sleep"])
def test_sigterm_ends_a_process_whose_main_thread_is_blocked_and_leaves_its_passport(tmp_path, where):
    script = tmp_path / "blocked.py"
    script.write_text(f"import sys\nsys.path.insert(0, {SRC!r})\nimport trainmeter as tm\n" + textwrap.dedent(BLOCKED),
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), where], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == -signal.SIGTERM  # died by the signal, as without trainmeter
    assert time.monotonic() - t0 < 10  # within the safe-point wait and the save's deadline
    (passport,) = (tmp_path / "runs").glob("*/passport.json")
    assert json.loads(passport.read_text())["status"] == "terminated"


@pytest.mark.slow
def test_a_sigterm_to_a_child_still_starting_ends_the_child_and_never_reaches_the_parent(tmp_path):
    script = tmp_path / "early.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))  # before ours: mid-start
        sys.path.insert(0, {SRC!r})
        import trainmeter as tm
        with tm.monitor(run_dir=sys.argv[1], name="early") as m:
            pid = os.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            time.sleep(1.5)  # past the watcher's wait: the parent saw no SIGTERM of its own
            m.on_step(10)
        print("child", code, "parent", m.status)
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"child {-signal.SIGTERM} parent completed" in proc.stdout
