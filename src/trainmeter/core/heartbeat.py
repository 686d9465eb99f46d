"""The heartbeat: a small run-log record and a bounded text line while a step runs long (docs/spec.md section 18).

A thread of ours reads two counters once a tick while a report is overdue (no lock, no user code, the hot path
untouched); what it writes and when: docs/spec.md sections 18 and 6 (``heartbeat``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainmeter.core.threads import OurThread

TICK_S = 1.0
TEXT_EVERY_S = 30.0
STOP_DEADLINE_S = 0.5


class Heartbeat:
    """Notes ``monitor``'s step counter once a tick; writes a heartbeat when no report came for ``interval_s`` and
    ``say``s a text line at most every ``text_every_s``. :meth:`beat` only reads the run."""

    def __init__(self, monitor: Any, interval_s: float, say: Callable[[str], None]) -> None:
        self._m = monitor
        self._say = say
        self.interval_s = interval_s
        self.tick_s = min(TICK_S, interval_s)
        self.text_every_s = max(TEXT_EVERY_S, interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._steps = -1
        self._step_since_s = 0.0
        self._reports = -1
        self._report_s = 0.0
        self._beat_s = self._look_s = self._text_s = float("-inf")

    def start(self) -> None:
        """Start the thread (training thread; returns at once)."""
        self.beat(self._m.clock())
        self._thread = OurThread(target=self._run, name="trainmeter-heartbeat")
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; wait at most :data:`STOP_DEADLINE_S`. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=STOP_DEADLINE_S)

    def _run(self) -> None:
        wait_s = self.tick_s
        while not self._stop.wait(wait_s):
            try:
                now_s = self._m.clock()
                self.beat(now_s)
                wait_s = self.wait_s(now_s)
            except Exception:  # a heartbeat never stops the run; try again next tick
                wait_s = self.tick_s

    def wait_s(self, now_s: float) -> float:
        """Seconds to the next look: a tick once the next report is due, else until it is due (at most an interval)."""
        return max(self.tick_s, min(self._m.steps_state.next_report_s - now_s, self.interval_s))

    def beat(self, now_s: float) -> dict[str, Any] | None:
        """Look at the run at clock time ``now_s``; return the heartbeat written, if one was due."""
        m = self._m
        rule = m.steps_state
        steps, reports = rule.steps, m.reports
        # the step under way began at the last counted step's end, not before the previous look, not after now_s
        if steps != self._steps:
            self._steps = steps
            self._step_since_s = min(now_s, max(self._look_s, rule.t0_s + rule.step_t_s)) if steps else now_s
        self._look_s = now_s
        if reports != self._reports:
            self._reports, self._report_s = reports, now_s
        if now_s - self._report_s < self.interval_s or now_s - self._beat_s < self.interval_s:
            return None
        self._beat_s = now_s
        running_s = now_s - self._step_since_s
        phase = m.spans.name if m.spans.depth else "train"  # a tm.phase open (eval) or training
        record = {"step": steps + 1, "steps_done": steps, "step_running_s": round(running_s, 3), "phase": phase,
                  "elapsed_s": round(m.phases.session_elapsed_s(now_s), 3),
                  "since_report_s": round(now_s - self._report_s, 3)}
        write = getattr(m.record_sink, "write_heartbeat", None)
        if write is not None:
            write(record)
        if m.text and running_s >= self.text_every_s and now_s - self._text_s >= self.text_every_s:  # a long step
            self._text_s = now_s
            where = "" if phase == "train" else f" (in {phase})"
            self._say(f"trainmeter: step {steps + 1:,} running for {running_s:.0f} s{where}")
        return record
