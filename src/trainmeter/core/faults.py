"""Faults of one run: each warned once, kept for the passport, and never raised into the user's code."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TextIO

from trainmeter.core.text import printable

MAX_WARNINGS = 100


class MonitorWarning(UserWarning):
    """A monitoring fault: trainmeter degrades and the run goes on."""


class Faults:
    """One run's warnings, each key once, kept for the passport, and its text lines (to ``out``). Any thread."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._lock = threading.Lock()
        self.new_run(out)

    def say(self, line: str) -> None:
        """Print one text line (one write with its newline: a steady report's line comes from the report worker)."""
        with suppress(Exception):
            print(printable(line) + "\n", end="", file=self.out or sys.stdout, flush=True)

    def say_once(self, line: str) -> None:
        """Print ``line`` unless it was said before in this run (an extension's warning at each report)."""
        if line not in self._said:
            self._said.add(line)
            self.say(line)

    def warn_once(self, key: str, message: str) -> None:
        """Warn once per ``key``; the message is kept for the passport (past ``MAX_WARNINGS``: counted)."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
            if len(self.warnings) >= MAX_WARNINGS:
                self.suppressed += 1
                return
            message = printable(message)
            self.warnings.append(message)
        with suppress(Exception):
            warnings.warn(f"trainmeter: {message}", MonitorWarning, stacklevel=2)

    def note(self, message: str) -> None:
        """Keep ``message`` among the run's warnings without a Python warning (a merged launch's summary)."""
        with self._lock:
            self.warnings.append(printable(message))

    def guard(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn``; on a fault warn once and return ``None``."""
        try:
            return fn(*args)
        except Exception as exc:
            self.warn_once(key, f"{key} failed and was disabled: {exc!r}")
            return None

    def new_run(self, out: TextIO | None) -> None:
        """Start afresh, text lines said to ``out`` (construction; a forked child's own run: nowhere)."""
        self.out = out
        self._warned: set[str] = set()
        self._said: set[str] = set()
        self.warnings: list[str] = []
        self.suppressed = 0


def quietly(fn: Callable[..., Any] | None, *args: Any) -> None:
    """``fn(*args)`` unless ``fn`` is ``None``, its exception swallowed: a warning never raises into what it reports."""
    if fn is not None:
        with suppress(Exception):
            fn(*args)


def fault_site(exc: BaseException) -> str:
    """`` at <file>:<line>`` of the innermost frame ``exc`` was raised in (a fault's warning says where), else ``""``."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f" at {code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} ({code.co_name})"
