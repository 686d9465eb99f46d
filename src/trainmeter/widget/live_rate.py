"""Recent throughput from the step series: the live tiles' and chart's rate, about once a second.

The run log's figures come at reports (``--interval``, 10 s by default); the
dashboard's rate tile, ETA and throughput line must move at a human pace instead.
:class:`RecentRate` keeps the steps of the last ``window_s`` seconds (time and
tokens of each, read from ``monitor.step_series`` by the publisher) and gives

    recent rate = tokens of the steps in the window / (time of the last step - time of the step before the window)

a sliding-window mean: it is the smoothed line (no per-report spike), the last
partial window is merged into a full-length one, and the window ends at the
last *step*, not at "now", so an interrupt or a pause draws no cliff to 0. It is
wall-clock time (every phase counts), labelled so; the training-only rate stays the
report's. Publisher thread only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

RECENT_WINDOW_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentFigures:
    """Figures over the last window of steps (wall-clock), as of the last step.

    Attributes:
        tokens_per_s: Tokens (or samples) per second over the window.
        steps_per_s: Optimizer steps per second over the window.
        window_tokens: Tokens of the steps in the window.
        window_steps: Steps in the window.
        window_s: Seconds the window spans (shorter than ``RECENT_WINDOW_S`` early in a run).
        t_s: Session seconds of the last step (the point's x on the throughput chart).
        rss_bytes: Process RSS read by the publisher with the figures, or ``None``.
    """

    tokens_per_s: float
    steps_per_s: float
    window_tokens: int
    window_steps: int
    window_s: float
    t_s: float
    rss_bytes: int | None = None


class RecentRate:
    """Sliding window over the step series.

    Args:
        window_s: Seconds of steps the rate averages over.
    """

    def __init__(self, window_s: float = RECENT_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, float]] = deque()  # (t_s, tokens) of each step
        self._before: tuple[float, float] | None = (0.0, 0.0)  # the step just before the window (run start)

    def extend(self, times_s: list[float], tokens: list[float]) -> None:
        """Add steps (session seconds at each step's end, tokens of each step)."""
        for t, n in zip(times_s, tokens, strict=False):
            self._points.append((float(t), float(n)))
        if not self._points:
            return
        last = self._points[-1][0]
        while len(self._points) > 1 and self._points[0][0] < last - self.window_s:
            self._before = self._points.popleft()

    def figures(self, rss_bytes: int | None = None) -> RecentFigures | None:
        """The window's figures, or ``None`` before the first step."""
        if not self._points or self._before is None:
            return None
        t_last = self._points[-1][0]
        span = t_last - self._before[0]
        if span <= 0:
            return None
        tokens = sum(n for _, n in self._points)
        steps = len(self._points)
        return RecentFigures(tokens_per_s=tokens / span, steps_per_s=steps / span, window_tokens=int(tokens),
                             window_steps=steps, window_s=span, t_s=t_last, rss_bytes=rss_bytes)


class RssReader:
    """Reads this process's RSS with psutil (``None`` without it). Publisher thread; about 20 us a read."""

    def __init__(self) -> None:
        try:
            import psutil

            self._process = psutil.Process()
        except Exception:
            self._process = None

    def read(self) -> int | None:
        """Current RSS in bytes, or ``None``."""
        if self._process is None:
            return None
        try:
            return int(self._process.memory_info().rss)
        except Exception:
            return None
