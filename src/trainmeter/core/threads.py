"""The threads of ours: a join that never raises when a Ctrl-C cut the thread's start (docs/spec.md section 18)."""

from __future__ import annotations

import threading
import time

START_WAIT_S = 1.0  # at most this long for a thread whose start was cut to be seen running


class OurThread(threading.Thread):
    """A daemon thread of ours whose ``join`` never raises "cannot join thread before it is started" when a Ctrl-C
    cut ``start``: it waits for it to run, within its timeout (at most :data:`START_WAIT_S`)."""

    def __init__(self, target, name: str, args: tuple = ()) -> None:
        super().__init__(target=target, name=name, args=args, daemon=True)

    def began(self, wait_s: float = START_WAIT_S) -> bool:
        """Whether the thread runs or ran, waiting up to ``wait_s`` for a start under way. Any thread."""
        deadline = time.monotonic() + wait_s
        while self.ident is None and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.ident is not None

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                super().join(left)
                return
            except RuntimeError:  # its start was cut: wait for it to be seen running, within the timeout
                if not self.began(START_WAIT_S if left is None else min(left, START_WAIT_S)):
                    return
                time.sleep(0.001)  # ident is set just before the flag join reads
