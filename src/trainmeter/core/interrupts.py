"""Signals around trainmeter's own state changes: Ctrl-C held back, parts of an end run whole (SIGTERM: terminate.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from contextlib import suppress
from types import FrameType
from typing import Any

from trainmeter.core.terminate import put_back, swap_handler

__all__ = ["HeldInterrupts", "run_parts"]


class HeldInterrupts:
    """A context that holds SIGINT back (``pending`` once one arrived); re-deliver it with :meth:`deliver`."""

    __slots__ = ("pending", "_frame", "_previous", "_installed")

    def __init__(self) -> None:
        self.pending = False
        self._frame: FrameType | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> HeldInterrupts:
        self._installed, self._previous = swap_handler(signal.SIGINT, self._hold)
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.pending = True
        self._frame = frame

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            self._installed = False
            put_back(signal.SIGINT, self._previous, signal.default_int_handler)

    def deliver(self) -> None:
        """Hand a held SIGINT to the handler that was in place (no-op when none arrived); with the default handler
        (or one that is not a Python callable), raise KeyboardInterrupt."""
        if not self.pending:
            return
        self.pending = False
        previous = self._previous
        if previous is signal.SIG_IGN:
            return
        if callable(previous):
            previous(signal.SIGINT, self._frame)
            return
        raise KeyboardInterrupt


def run_parts(parts: Iterable[tuple[str, Callable[[], Any]]], warn: Callable[[str, Exception], None], *,
              needs_first: bool = False) -> bool:
    """Run each part once, once more if a ``KeyboardInterrupt`` cut it; whether one came. Another exception goes
    to ``warn(key, exc)`` and the next parts run, unless ``needs_first`` and the first never completed."""
    interrupted = False
    for index, (key, part) in enumerate(parts):
        done = False
        for _attempt in range(2):
            try:
                part()
                done = True
            except KeyboardInterrupt:
                interrupted = True
                continue
            except Exception as exc:
                with suppress(Exception):  # a warning must not stop the parts
                    warn(key, exc)
            break
        if index == 0 and needs_first and not done:
            break
    return interrupted
