"""The report worker: jobs in order on our thread, drained at the end, faults contained, bounded queue."""

from __future__ import annotations

import threading

import pytest

from trainmeter.core import report_worker
from trainmeter.core.report_worker import THREAD_NAME, ReportWorker


def _alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_jobs_run_in_submit_order_on_the_worker_thread_and_drain_waits_for_them() -> None:
    worker, seen = ReportWorker(), []
    gate = threading.Event()
    worker.submit("a", lambda: gate.wait(10))
    for i in range(50):
        worker.submit("a" if i % 2 else "b", lambda i=i: seen.append((i, threading.current_thread().name)))
    assert seen == []  # the submitter never ran a job: it went on at once
    gate.set()
    assert worker.drain(10)
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {THREAD_NAME}
    worker.close()
    assert not _alive()


def test_a_raising_job_disables_its_owner_only_and_is_reported_once() -> None:
    faults, ran = [], []
    worker = ReportWorker(on_fault=lambda owner, exc: faults.append((owner, str(exc))))

    def boom() -> None:
        raise ValueError("bad point")

    worker.submit("verdicts", boom)
    worker.submit("verdicts", lambda: ran.append("verdicts"))
    worker.submit("curves", lambda: ran.append("curves"))
    assert worker.drain(10)
    worker.close()
    assert faults == [("verdicts", "bad point")] and ran == ["curves"]
    assert "verdicts" in worker.disabled


def test_unthreaded_runs_each_job_at_once_in_the_caller() -> None:
    worker, seen = ReportWorker(threaded=False), []
    worker.submit("a", lambda: seen.append(threading.current_thread().name))
    assert seen == [threading.current_thread().name] and worker.drain(0.0)
    assert not _alive()


def test_a_full_queue_that_does_not_move_is_declared_stuck_and_submits_return(monkeypatch) -> None:
    monkeypatch.setattr(report_worker, "STUCK_AFTER_S", 0.05)
    monkeypatch.setattr(report_worker, "MAX_JOBS", 2)
    faults, gate = [], threading.Event()
    worker = ReportWorker(on_fault=lambda owner, exc: faults.append((owner, str(exc))))
    worker.submit("hang", lambda: gate.wait(10))
    worker.submit("curves", lambda: None)
    worker.submit("verdicts", lambda: None)
    worker.submit("verdicts", lambda: None)  # the queue is full and the running job hangs: stuck, not a wait forever
    assert [owner for owner, _ in faults] == ["report-worker"] and "curves, verdicts" in faults[0][1]
    worker.submit("verdicts", lambda: pytest.fail("a stuck worker takes no more jobs"))
    gate.set()
    worker.close(10)
    assert not _alive()


def test_close_runs_what_is_queued_and_later_jobs_run_at_once() -> None:
    worker, seen = ReportWorker(), []
    worker.submit("a", lambda: seen.append(1))
    worker.close(10)
    assert seen == [1] and not _alive()
    worker.submit("a", lambda: seen.append(threading.current_thread().name))
    assert seen == [1, threading.current_thread().name]


def test_folds_run_while_idle_once_woken_and_a_raising_fold_disables_its_owner(monkeypatch) -> None:
    monkeypatch.setattr(report_worker, "FOLD_EVERY_S", 0.005)
    ran, faults = threading.Event(), []
    worker = ReportWorker(on_fault=lambda owner, exc: faults.append(owner))
    worker.every("optim", ran.set)
    worker.every("bad", lambda: 1 / 0)
    assert not _alive() and not ran.wait(0.05)  # registered only: no thread before a job or a wake
    worker.wake()
    assert ran.wait(10)
    worker.close(10)
    assert faults == ["bad"] and "bad" in worker.disabled and not _alive()
    unthreaded = ReportWorker(threaded=False)
    unthreaded.every("optim", lambda: pytest.fail("an unthreaded worker runs no fold"))
    unthreaded.wake()
    assert not _alive()


def test_a_job_that_submits_a_job_runs_it_at_once_on_the_worker_and_says_it_is_there() -> None:
    worker, seen = ReportWorker(), []
    assert worker.accepting and not worker.on_worker_thread()

    def outer() -> None:
        seen.append(("outer", worker.on_worker_thread()))
        worker.submit("inner", lambda: seen.append(("inner", threading.current_thread().name)))
        seen.append(("after", None))

    worker.submit("outer", outer)
    worker.submit("later", lambda: seen.append(("later", None)))
    assert worker.drain(10)
    assert seen == [("outer", True), ("inner", THREAD_NAME), ("after", None), ("later", None)]
    worker.close()
    assert not worker.accepting and not ReportWorker(threaded=False).accepting


def test_hold_for_fork_waits_for_the_running_job_and_no_job_begins_until_released() -> None:
    worker = ReportWorker()
    began, go, ran = threading.Event(), threading.Event(), []
    worker.submit("a", lambda: (began.set(), go.wait(10.0), ran.append("a")))
    assert began.wait(10.0)
    threading.Timer(0.05, go.set).start()
    worker.hold_for_fork(10.0)  # returns once "a" ended: the fork would copy no half-run job
    assert ran == ["a"] and worker.pending == 0
    other = threading.Thread(target=worker.submit, args=("b", lambda: ran.append("b")))
    other.start()  # a sampler thread's submit waits at the held lock: no job begins across the fork
    other.join(0.05)
    assert other.is_alive() and ran == ["a"]
    worker.release_after_fork()
    other.join(10.0)
    assert worker.drain(10.0) and ran == ["a", "b"]
    worker.close()


def test_a_job_still_running_when_the_fork_wait_ends_is_named_by_the_childs_reset() -> None:
    worker = ReportWorker()
    began, go = threading.Event(), threading.Event()
    worker.submit("compute", lambda: (began.set(), go.wait(10.0)))
    assert began.wait(10.0)
    worker.hold_for_fork(0.01)  # the bounded wait ends with the job under way
    try:
        child = ReportWorker.__new__(ReportWorker)  # the child's copy: the same fields, no thread of its own
        child.__dict__.update(worker.__dict__)
        assert child.reset_in_child() == "compute"
        assert child.pending == 0 and child._thread is None and not child._held_for_fork
        assert child.reset_in_child() is None  # its own worker: nothing under way
    finally:
        worker.release_after_fork()
        go.set()
    assert worker.drain(10.0)
    worker.close()


def test_hold_for_fork_without_a_thread_holds_nothing() -> None:
    worker = ReportWorker()
    worker.hold_for_fork(0.01)
    assert not worker._held_for_fork
    worker.release_after_fork()  # a no-op
    assert worker.reset_in_child() is None


def test_a_run_folds_every_quarter_of_its_report_interval_within_the_bounds() -> None:
    assert report_worker.fold_every_s(10.0) == 2.5
    assert report_worker.fold_every_s(0.1) == report_worker.FOLD_EVERY_S
    assert report_worker.fold_every_s(3600.0) == report_worker.MAX_FOLD_EVERY_S


def test_a_fold_under_way_at_the_fork_names_no_torn_owner(monkeypatch) -> None:
    monkeypatch.setattr(report_worker, "FOLD_EVERY_S", 0.005)
    folding, go = threading.Event(), threading.Event()
    worker = ReportWorker()
    worker.every("optim", lambda: (folding.set(), go.wait(10.0)))
    worker.wake()
    assert folding.wait(10.0)
    try:
        child = ReportWorker.__new__(ReportWorker)  # the child's copy, taken while the fold runs
        child.__dict__.update(worker.__dict__)
        assert child.running and child.reset_in_child() is None  # a fold publishes by replacing a reference
    finally:
        go.set()
    worker.close()
