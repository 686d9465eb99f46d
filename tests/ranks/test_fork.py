"""Fork safety (ranks/fork.py): no descriptor of the parent's log, no lock of ours, no import lock in the child."""

from __future__ import annotations

import builtins
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmeter as tm
from trainmeter.core import monitor as monitor_module

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/fd").is_dir(),
                                reason="needs os.fork and /proc")

CHILD_DEADLINE_S = 60.0


def steps(n: int) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()


def in_child(check: Any) -> int:
    """Fork; the child exits 0 when ``check()`` is true (1 when it raised); the child's exit code."""
    pid = os.fork()
    if pid == 0:
        try:
            code = 0 if check() else 3
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def open_paths() -> set[str]:
    paths = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return paths


def test_a_forked_child_holds_no_descriptor_of_the_parents_run_log(run_root: Path) -> None:
    with tm.monitor(name="parent", run_dir=run_root) as m:
        steps(2)
        log = str((m.run_dir / "events.jsonl").resolve())
        assert log in open_paths()  # the parent's own, open for appends
        assert in_child(lambda: monitor_module._ACTIVE is m and log not in open_paths()) == 0
        assert log in open_paths()  # the parent keeps its own
    assert (m.run_dir / "events.jsonl").read_text().count('"kind":"start"') == 1


def test_a_lock_of_ours_held_by_a_thread_at_the_fork_is_free_in_the_child(run_root: Path) -> None:
    from trainmeter.widget import attach, restore_route

    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # the shell-channel thread deciding a route, the publisher reading the registry
        with attach._REGISTRY_LOCK, restore_route._LOCK:
            held.set()
            release.wait(CHILD_DEADLINE_S)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert held.wait(CHILD_DEADLINE_S)

        def free() -> bool:
            locks = (attach._REGISTRY_LOCK, restore_route._LOCK)
            return all(lock.acquire(timeout=2.0) for lock in locks)

        assert in_child(free) == 0
    finally:
        release.set()
        thread.join(CHILD_DEADLINE_S)


def test_psutil_is_imported_on_the_training_thread_before_the_node_sampler_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psutil")
    from trainmeter.host.extension import NodeSampler

    events: list[tuple[str, bool]] = []
    main = threading.get_ident()
    real_import, real_start = builtins.__import__, threading.Thread.start

    def spy_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "psutil":
            events.append(("import psutil", threading.get_ident() == main))
        return real_import(name, *args, **kwargs)

    def spy_start(thread: threading.Thread) -> None:
        if thread.name == "trainmeter-node":
            events.append(("thread start", True))
            return  # the sampler's thread is not needed: only the order on this thread matters
        real_start(thread)

    class Run:
        run_dir = None
        clock = staticmethod(lambda: 0.0)

    monkeypatch.setattr(builtins, "__import__", spy_import)
    monkeypatch.setattr(threading.Thread, "start", spy_start)
    sampler = NodeSampler()
    sampler.start(Run())  # type: ignore[arg-type]
    monkeypatch.undo()
    sampler._stop.set()
    assert events[:2] == [("import psutil", True), ("thread start", True)], events


def test_a_child_forked_just_after_the_start_finishes_its_own_run(run_root: Path) -> None:
    """The child steps and ends through the whole finish path (memory sample, passport) without hanging."""
    with tm.monitor(name="parent", run_dir=run_root, interval_s=0.1) as m:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                steps(2)
                child = monitor_module._ACTIVE
                child.finish("completed")
                code = 0 if child.steps == 2 and child.status == "completed" else 4
            finally:
                os._exit(code)
        deadline = threading.Event()
        result: list[int] = []

        def wait() -> None:
            _, status = os.waitpid(pid, 0)
            result.append(os.waitstatus_to_exitcode(status))
            deadline.set()

        threading.Thread(target=wait, daemon=True).start()
        finished = deadline.wait(CHILD_DEADLINE_S)
        if not finished:
            os.kill(pid, 9)
        steps(1)
    assert finished and result == [0]
    assert m.steps == 1


@pytest.mark.monitor_warns("no module holding")  # 1 run in 3: a sweep of 1-step models while the counted
# pass is held loses a root (seen at 425fa9e, not yet explained: the stop note of issue 38 names it)
def test_a_child_forked_while_the_parents_counted_pass_runs_on_the_worker_counts_its_own_model(
        run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork comes while the report worker is inside the parent's counted pass (its lock held): the child
    neither waits for that pass nor reports it; it counts its own model at its own first report."""
    import time

    from trainmeter.compute import counted_pass

    parent, began, gate = os.getpid(), threading.Event(), threading.Event()
    real_pass = counted_pass._counted_pass

    def held_pass(*args: Any, on_training_thread: bool) -> Any:  # inside PreparedCount.run's lock
        if os.getpid() == parent and not on_training_thread:
            began.set()
            gate.wait(CHILD_DEADLINE_S)
        return real_pass(*args, on_training_thread=on_training_thread)

    monkeypatch.setattr(counted_pass, "_counted_pass", held_pass)
    monkeypatch.setattr(counted_pass, "_compiled_anything", lambda: False)  # an earlier test's compile: no matter
    with tm.monitor(name="parent", run_dir=run_root, interval_s=0.1) as m:
        until = time.monotonic() + CHILD_DEADLINE_S
        while not began.is_set() and time.monotonic() < until:
            steps(1)
            time.sleep(0.01)
        assert began.is_set()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                model = torch.nn.Linear(8, 3)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for _ in range(2):
                    model(torch.randn(2, 8)).sum().backward()
                    opt.step()
                child = monitor_module._ACTIVE
                child.finish("completed")
                counted = child.extension("compute").counted
                code = 0 if child.status == "completed" and counted is not None and counted.value == 96 else 4
            finally:
                os._exit(code)
        result: list[int] = []
        waited = threading.Thread(target=lambda: result.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])),
                                  daemon=True)
        waited.start()
        waited.join(CHILD_DEADLINE_S)
        if not result:
            os.kill(pid, 9)
        gate.set()
    # 96 FLOPs per sample: forward and weight gradient, 2 x (2 x 8 x 3), the child's Linear(8, 3), not the parent's
    assert result == [0]
    assert m.extension("compute").counted.value == 16  # the parent's own pass, once let go: 2 x (2 x 4 x 1)
