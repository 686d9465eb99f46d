"""Item 2: Ctrl-C at any moment of start, a report or finish leaves nothing behind and is re-raised.

The interrupt is driven the way it was found: a KeyboardInterrupt raised at the
k-th reading of the run's clock (every k of a whole run, so every point of
start, report and finish is hit), from an extension's start/stop, and a real
SIGINT delivered while finish runs.
"""

from __future__ import annotations

import signal
import threading

import pytest

from tests.conftest import tiny_model_and_data
from tests.faults.conftest import assert_left_nothing, assert_passport_valid
from trainmeter.api import run_monitored
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.options import make_options


class InterruptingClock(FakeClock):
    """A fake clock that raises KeyboardInterrupt at its ``k``-th reading on the main thread (once)."""

    def __init__(self, k: int) -> None:
        super().__init__(100.0)
        self.k = k
        self.calls = 0

    def __call__(self) -> float:
        if threading.current_thread() is threading.main_thread():
            self.calls += 1
            if self.calls == self.k:
                raise KeyboardInterrupt
        return self.now_s


def _run(run_root, clock, steps: int = 4, extra=()):
    import torch.nn.functional as F

    options = make_options(run_dir=run_root, interval_s=1.0, name="ctrlc", widget=False, tap=False)
    m = make_monitor(options, clock=clock, text=False, extensions=[*default_extensions(options), *extra])
    model, opt, batches = tiny_model_and_data()
    raised = None
    try:
        with run_monitored(m):
            for x, y in batches[:steps]:
                clock.advance(0.6)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    except KeyboardInterrupt as exc:
        raised = exc
    return m, raised


def test_a_clean_run_reads_the_clock_often_enough_to_cover_start_reports_and_finish(run_root, patch_points):
    clock = InterruptingClock(k=0)
    m, raised = _run(run_root, clock)
    assert raised is None and m.status == "completed" and m.reports >= 2
    assert clock.calls > 20
    assert_left_nothing(patch_points)


@pytest.mark.monitor_warns("backward was called but no optimizer step")  # a Ctrl-C between backward and step
def test_ctrl_c_at_every_clock_reading_frees_the_slot_restores_patches_and_keeps_the_passport(run_root, patch_points):
    total = InterruptingClock(k=0)
    _run(run_root / "probe", total)
    statuses = set()
    for k in range(1, total.calls + 1):
        clock = InterruptingClock(k)
        m, raised = _run(run_root / str(k), clock)
        assert isinstance(raised, KeyboardInterrupt), f"k={k}: the Ctrl-C was swallowed"
        assert_left_nothing(patch_points)
        passport = assert_passport_valid(m.run_dir)
        statuses.add(passport["status"] if passport else None)
    assert "interrupted" in statuses  # Ctrl-C in the body or a report
    assert "completed" in statuses  # Ctrl-C inside finish: the body had completed


class _Raising:
    """An extension that raises KeyboardInterrupt from ``start`` or ``stop``."""

    name = "raising"

    def __init__(self, where: str) -> None:
        self.where = where

    def start(self, monitor) -> None:
        if self.where == "start":
            raise KeyboardInterrupt

    def stop(self) -> None:
        if self.where == "stop":
            raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["start", "stop"])
def test_ctrl_c_from_an_extension_at_start_or_finish_is_reraised_after_cleanup(run_root, patch_points, where):
    m, raised = _run(run_root, FakeClock(100.0), extra=[_Raising(where)])
    assert isinstance(raised, KeyboardInterrupt)
    assert_left_nothing(patch_points)
    passport = assert_passport_valid(m.run_dir)
    assert passport["status"] == ("interrupted" if where == "start" else "completed")
    if where == "start":
        assert passport["steps"] == 0  # the body never ran: no leftover monitor counts it later


class _Sigint:
    """An extension whose ``stop`` receives a real SIGINT (the user pressing Interrupt during finish)."""

    name = "sigint"

    def start(self, monitor) -> None:
        pass

    def stop(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_real_sigint_during_finish_is_held_until_cleanup_then_delivered(run_root, patch_points):
    m, raised = _run(run_root, FakeClock(100.0), extra=[_Sigint()])
    assert isinstance(raised, KeyboardInterrupt)
    assert_left_nothing(patch_points)
    assert assert_passport_valid(m.run_dir)["status"] == "completed"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_next_run_starts_after_an_interrupted_one(run_root, patch_points):
    _run(run_root / "a", InterruptingClock(3))
    m, raised = _run(run_root / "b", FakeClock(100.0))
    assert raised is None and m.status == "completed" and m.steps == 4


def _absorb(fn) -> None:
    """Run ``fn`` to the end, swallowing KeyboardInterrupts that land meanwhile (the test's own waits)."""
    while True:
        try:
            fn()
            return
        except KeyboardInterrupt:
            continue


@pytest.mark.monitor_warns("backward was called but no optimizer step")  # a Ctrl-C between backward and step
def test_real_sigints_at_random_moments_never_leave_the_slot_patches_or_threads(run_root, patch_points):
    import random
    import time

    import torch.nn.functional as F

    rng = random.Random(11)
    main_id = threading.main_thread().ident
    model, opt, batches = tiny_model_and_data()
    # how long one monitored run takes here, so the signals spread over start, steps and finish
    t0 = time.perf_counter()
    _run(run_root / "timing", FakeClock(100.0))
    span_s = time.perf_counter() - t0
    interrupted = 0
    for trial in range(25):
        timer = threading.Timer(rng.uniform(0, span_s * 1.2), signal.pthread_kill, (main_id, signal.SIGINT))
        m = None
        try:
            timer.start()
            options = make_options(run_dir=run_root / str(trial), interval_s=1.0, name="sig", widget=False, tap=False)
            m = make_monitor(options, clock=FakeClock(100.0), text=False, extensions=default_extensions(options))
            with run_monitored(m):
                for x, y in batches[:4]:
                    m.clock.advance(0.6)
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            _absorb(timer.join)
        except KeyboardInterrupt:
            interrupted += 1
        _absorb(timer.join)
        _absorb(lambda: time.sleep(0.002))  # a signal already sent is handled here at the latest
        assert_left_nothing(patch_points)
        if m is not None and m.run_dir is not None and m.status != "running":
            assert_passport_valid(m.run_dir)
    assert interrupted > 0
