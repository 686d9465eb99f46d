"""core/fork_locks.py: a lock held by a thread at a fork is a free, new lock in the child; the parent's stays."""

from __future__ import annotations

import os
import threading

import pytest

from trainmeter.core.fork_locks import fresh_in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_a_lock_held_at_the_fork_is_a_new_free_lock_in_the_child_and_still_held_in_the_parent():
    namespace = {"_LOCK": threading.Lock()}
    fresh_in_child(namespace, "_LOCK")
    held = namespace["_LOCK"]
    held.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit status says what it saw
            lock = namespace["_LOCK"]
            os._exit(0 if lock is not held and lock.acquire(timeout=5.0) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert namespace["_LOCK"] is held and held.locked()
    finally:
        held.release()
