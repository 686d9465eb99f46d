"""Faults of one run: each warned once, kept for the passport, and never raised into the user's code."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

from trainmeter.core.text import printable

MAX_WARNINGS = 100


class MonitorWarning(UserWarning):
    """A monitoring fault: trainmeter degrades and the run goes on."""



class Faults:
    """The monitor's fault reporting (a part of :class:`~trainmeter.core.monitor.Monitor`).

    Holds nothing of its own: ``warnings``, ``warnings_suppressed``, ``_warned`` and ``out``
    are the monitor's, set in its constructor.
    """

    out: Any
    warnings: list[str]
    warnings_suppressed: int
    _warned: set[str]

    def _say(self, line: str) -> None:
        try:
            # one write with its newline: a steady report's line comes from the report worker (docs/spec.md section 20)
            print(printable(line) + "\n", end="", file=self.out or sys.stdout, flush=True)
        except Exception:
            pass

    def warn_once(self, key: str, message: str) -> None:
        """Warn once per ``key`` for this run; the message is kept for the passport. Any thread.

        Control characters in ``message`` are escaped; after ``MAX_WARNINGS``
        distinct warnings, later ones are only counted (``warnings_suppressed``).
        """
        if key in self._warned:
            return
        self._warned.add(key)
        if len(self.warnings) >= MAX_WARNINGS:
            self.warnings_suppressed += 1
            return
        message = printable(message)
        self.warnings.append(message)
        try:
            warnings.warn(f"trainmeter: {message}", MonitorWarning, stacklevel=2)
        except Exception:
            pass

    def _guard(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn``; on a fault warn once and return ``None``."""
        try:
            return fn(*args)
        except Exception as exc:
            self.warn_once(key, f"{key} failed and was disabled: {exc!r}")
            return None
