"""A Ctrl-C at any moment of a monitored block's start or finish: only KeyboardInterrupt reaches the user, and the
run is finished whole (passport written, slot freed, handlers and threads restored) (issue 37, defect C)."""

from __future__ import annotations

import signal
import threading

import pytest

import trainmeter as tm
from trainmeter.core.monitor import active


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError])
def test_a_sigterm_watcher_that_does_not_start_never_raises_its_join_into_the_user(tmp_path, monkeypatch, raised):
    """A Ctrl-C inside ``Thread.start`` (its wait for the new thread) or a thread limit: the start is undone whole."""
    start = threading.Thread.start

    def failing_start(self):
        if self.name == "trainmeter-sigterm":
            raise raised("can't start new thread") if raised is RuntimeError else raised()
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", failing_start)
    escaped: BaseException | None = None
    try:
        with tm.monitor(name="watcher", run_dir=tmp_path, interval_s=0.1):
            pass
    except BaseException as exc:  # noqa: BLE001
        escaped = exc
    assert escaped is None or isinstance(escaped, KeyboardInterrupt), repr(escaped)
    assert active() is None
    assert list(tmp_path.glob("*/passport.json"))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
