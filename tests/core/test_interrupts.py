"""Holding SIGINT back and saving on SIGTERM: handlers installed and restored, signals never swallowed."""

from __future__ import annotations

import signal
import threading

import pytest

from trainmeter.core.interrupts import HeldInterrupts, TerminateHandler, run_parts


def test_a_sigint_while_held_is_remembered_then_raised_by_the_default_handler():
    before = signal.getsignal(signal.SIGINT)
    with HeldInterrupts() as held:
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt here
        assert held.pending
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):
        held.deliver()
    held.deliver()  # once only


def test_without_a_sigint_nothing_is_delivered():
    with HeldInterrupts() as held:
        pass
    held.deliver()
    assert not held.pending


def test_a_custom_sigint_handler_gets_the_held_signal():
    seen = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with HeldInterrupts() as held:
            signal.raise_signal(signal.SIGINT)
        assert seen == []
        held.deliver()
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old)


def test_off_the_main_thread_nothing_is_installed():
    box = []

    def body():
        with HeldInterrupts() as held:
            box.append(held._installed)
        t = TerminateHandler(lambda: None)
        box.append(t.install())

    th = threading.Thread(target=body)
    th.start()
    th.join()
    assert box == [False, False]


def test_run_parts_runs_a_part_cut_by_an_interrupt_once_more_and_reports_it():
    calls = []

    def cut_once():
        calls.append("cut")
        if calls.count("cut") == 1:
            raise KeyboardInterrupt

    def broken():
        raise OSError("disk")

    warned = []
    parts = [("a", cut_once), ("b", broken), ("c", lambda: calls.append("c"))]
    assert run_parts(parts, lambda key, exc: warned.append(key)) is True
    assert calls == ["cut", "cut", "c"] and warned == ["b"]
