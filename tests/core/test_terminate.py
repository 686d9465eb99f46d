"""SIGTERM noted by a handler that does no work: installed, restored, never kept by a forked child."""

from __future__ import annotations

import signal
import threading

from trainmeter.core.interrupts import TerminateHandler


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
