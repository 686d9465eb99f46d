"""The alerts' watchdog thread: once a second, the alert rules, the hang check and the run's control file.

The training thread is never asked for anything (docs/spec.md section 21; the control file: docs/protocol.md,
"Controls"). Thread safety: its own thread; requests go through ``monitor.controls`` (thread-safe).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from trainmeter.core.threads import OurThread

CONTROL_FILE = "control.json"
CONTROL_ACTIONS = ("stop", "checkpoint")
MAX_CONTROL_BYTES = 4096
MAX_IDS_KEPT = 256
TOP_FRAMES = 8


def read_control(path: Path, run_id: str) -> tuple[str, str] | None:
    """``(action, id)`` of a valid control file for run ``run_id``, else ``None`` (missing, a link, too big,
    not JSON, another run's, an unknown action). Never raises."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONTROL_BYTES:
            return None
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_CONTROL_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("run_id") != run_id:
        return None
    action, ident = data.get("action"), data.get("id")
    if action not in CONTROL_ACTIONS or not isinstance(ident, str | int) or isinstance(ident, bool):
        return None
    return str(action), str(ident)


def thread_frames(ident: int | None, limit: int = TOP_FRAMES) -> list[str]:
    """The top ``limit`` frames of thread ``ident``, innermost last (``file:line in function``), after the innermost
    notebook cell's frame when it is deeper; ``[]`` if gone."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return []
    stack = [f"{code_place(f.filename, f.lineno)} in {f.name}" for f in traceback.extract_stack(frame)]
    cell = next((s for s in reversed(stack) if s.startswith("cell [")), None)
    return stack[-limit:] if cell is None or cell in stack[-limit:] else [cell, *stack[-limit:]]


def code_place(filename: str, line: int | None) -> str:
    """``cell [n], line m`` for a notebook cell's code (IPython compiles a cell under a temporary file named by a hash
    of its code, ``/tmp/ipykernel_<pid>/<hash>.py``, and maps it to the cell's execution count), else ``file:line``."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    names = getattr(getattr(get() if get is not None else None, "compile", None), "_filename_map", None)
    number = names.get(filename) if isinstance(names, dict) else None
    return f"cell [{number}], line {line}" if isinstance(number, int) else f"{filename}:{line}"


class Watchdog:
    """One daemon thread per run (``trainmeter-alerts``) over ``monitor`` and the ``alerts`` wing, a tick every
    ``interval_s`` seconds."""

    def __init__(self, monitor: Any, alerts: Any, interval_s: float = 1.0) -> None:
        self._m = monitor
        self._alerts = alerts
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_steps = -1
        self._last_change_s = 0.0
        self._control_sig: tuple[int, int] | None = None
        self._ids: list[str] = []

    def start(self) -> None:
        """Start the thread."""
        self._last_change_s = self._m.clock()
        self._thread = OurThread(target=self._run, name="trainmeter-alerts")
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.tick(self._m.clock())
            except Exception as exc:  # never raise on our thread; one warning
                with contextlib.suppress(Exception):
                    self._m.warn_once("alerts-watchdog", f"the alerts' watchdog failed and stopped: {exc!r}")
                return

    def tick(self, now_s: float) -> None:
        """One check: the rules, the hang, the control file."""
        self._alerts.check()
        self._hang(now_s)
        self._control()

    def _hang(self, now_s: float) -> None:
        m = self._m
        steps = m.steps
        if steps != self._last_steps or not m.phases.training:  # a step came, or eval/checkpoint time: no hang
            self._last_steps, self._last_change_s = steps, now_s
            return
        quiet_s = now_s - self._last_change_s
        for rule in self._alerts.hang_rules():
            if rule.threshold is not None and quiet_s >= rule.threshold:
                where = thread_frames(self._alerts.training_ident)
                top = where[-1] if where else "its stack could not be read"
                cell = next((w for w in reversed(where) if w.startswith("cell [")), top)  # the notebook's line
                top += "" if cell == top else f", called from {cell}"
                self._alerts.fire(rule, steps, f"no optimizer step for {quiet_s:.0f} s after step {steps}; "
                                               f"the training thread is at {top}", where=where)

    def _control(self) -> None:
        run_dir = self._m.run_dir
        if run_dir is None:
            return
        path = Path(run_dir) / CONTROL_FILE
        try:
            st = os.lstat(path)
        except OSError:
            return
        sig = (st.st_mtime_ns, st.st_size)
        if sig == self._control_sig:
            return
        self._control_sig = sig
        got = read_control(path, Path(run_dir).name)
        if got is None or got[1] in self._ids:
            return
        action, ident = got
        self._ids = [*self._ids[-(MAX_IDS_KEPT - 1):], ident]
        controls = self._m.controls
        (controls.request_stop if action == "stop" else controls.request_checkpoint)("control-file")
