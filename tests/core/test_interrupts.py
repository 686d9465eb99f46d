"""Holding SIGINT back and saving on SIGTERM: handlers installed and restored, signals never swallowed."""

from __future__ import annotations

import signal
import threading

import pytest

from trainmeter.core.interrupts import HeldInterrupts, TerminateHandler


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


def test_the_terminate_handler_restores_the_previous_one_on_remove():
    before = signal.getsignal(signal.SIGTERM)
    t = TerminateHandler(lambda: None)
    assert t.install() and signal.getsignal(signal.SIGTERM) is not before
    t.remove()
    t.remove()
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_terminate_handler_only_notes_the_signal_and_calls_the_request():
    calls = []
    seen = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        t = TerminateHandler(lambda: calls.append("request"), wakeup=False)
        assert t.install() and not t.ends
        signal.raise_signal(signal.SIGTERM)
        assert t.pending and calls == ["request"] and seen == [signal.SIGTERM]  # the program's handler ran at once
        t.remove()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_forked_child_gets_the_previous_sigterm_handler_and_wakeup_descriptor_back():
    import os

    before = signal.getsignal(signal.SIGTERM)
    t = TerminateHandler(lambda: None)
    assert t.install() and t.ends
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the default handler again, no descriptor of ours
        ok = signal.getsignal(signal.SIGTERM) is before and signal.set_wakeup_fd(-1) == -1
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.close(w)
    t.remove()
    assert signal.getsignal(signal.SIGTERM) is before and signal.set_wakeup_fd(-1) == -1
    assert not any(th.name == "trainmeter-sigterm" for th in threading.enumerate())
