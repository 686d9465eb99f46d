"""Recent throughput about once a second (docs/protocol.md section 1, "Refresh"): the sliding-window rate of the last
``window_s`` seconds of steps, and the training-only rate over the same window from the phase clock's samples.
Publisher thread only."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from itertools import accumulate, islice

RECENT_WINDOW_S = 10.0
MAX_WINDOW_ENTRIES = 4096
"""Most entries the window holds: past it, the steps of each ``window_s / (MAX_WINDOW_ENTRIES // 2)`` cell of time are
folded into one entry (the last step's time, cumulative tokens and steps), so a fast run's window is bounded; counts
stay exact and the window still starts at a step's end (docs/spec.md section 18)."""
PACE_TAU_S = 20.0
"""Longest time constant of the ETA's smoothed pace: an EMA of the rate over the last min(window_s, age / 2) seconds of
steps, time constant min(PACE_TAU_S, age / 4), age the seconds since the run's first step: a young run's ETA follows
its measured pace, startup left out, and an older one's counts down steadily (docs/spec.md section 5)."""
STALL_MIN_S = 1.0
"""No step for this long, and for twice the window's mean seconds per step, is a stall (a hang, or eval time): the
window then ends now, so the rate decays and the ETA grows while no step comes (docs/spec.md section 12)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentFigures:
    """Figures over the last window of steps (wall-clock), as of the last step; tokens are samples where the run counts
    those. ``window_s`` is shorter than :data:`RECENT_WINDOW_S` early in a run; ``t_s``: the last step's session seconds
    (the point's x on the throughput chart); ``rss_bytes``: read by the publisher with the figures. The training-only
    figures are ``None`` without a phase-clock sample or training time in the window; the smoothed rates are the ETA's
    pace (:data:`PACE_TAU_S`; ``None`` before a step after the first; in a stall scaled down as the window's rate is).
    ``stalled_s``: the seconds since the last step in a stall (:data:`STALL_MIN_S`), when the window and ``t_s`` end
    now, else ``None``."""

    tokens_per_s: float
    steps_per_s: float
    window_tokens: int
    window_steps: int
    window_s: float
    t_s: float
    rss_bytes: int | None = None
    train_tokens_per_s: float | None = None
    window_train_s: float | None = None
    smoothed_steps_per_s: float | None = None
    smoothed_tokens_per_s: float | None = None
    stalled_s: float | None = None


class RecentRate:
    """Sliding window over the step series: the last ``window_s`` seconds of steps."""

    def __init__(self, window_s: float = RECENT_WINDOW_S) -> None:
        self.window_s = window_s
        # the window's steps as two columns, extended and cut by C-level list operations (a fast run reads
        # thousands of steps a tick): seconds at each step's end, cumulative tokens (integers: exact sums)
        self._times: list[float] = []
        self._cum: list[float] = []
        self._steps: list[int] = []  # cumulative steps at each entry (an entry is one step until the window folds)
        self._base = 0.0  # cumulative tokens before the window
        self._steps_base = 0  # cumulative steps before the window
        self._folded = 0  # leading entries already one per cell of time (see _fold)
        self._start_s = 0.0  # session seconds of the entry just before the window: where the window starts
        self._clock: deque[tuple[float, float]] = deque([(0.0, 0.0)])  # (session s, training s) samples
        self._pace: tuple[float, float, float] | None = None  # (t_s, steps/s, tokens/s) of the smoothed pace
        self._first_s = 0.0  # session seconds at the end of the run's first step (its startup: never in the pace)

    def extend(self, times_s: list[float], tokens: list[float]) -> None:
        """Add steps (session seconds at each step's end, tokens of each step)."""
        k = min(len(times_s), len(tokens))
        if k == 0:
            return
        times, cum, steps = self._times, self._cum, self._steps
        last_step = steps[-1] if steps else self._steps_base
        if not steps and not self._steps_base:
            self._first_s = float(times_s[0])
        times.extend(map(float, times_s[:k]))
        cum.extend(islice(accumulate(map(float, tokens[:k]), initial=cum[-1] if cum else self._base), 1, None))
        steps.extend(range(last_step + 1, last_step + k + 1))
        cut = min(bisect_left(times, times[-1] - self.window_s), len(times) - 1)  # the first step in the window
        if cut > 0:
            self._start_s = times[cut - 1]
            self._base, self._steps_base = cum[cut - 1], steps[cut - 1]
            del times[:cut], cum[:cut], steps[:cut]
            self._folded = max(0, self._folded - cut)
        if len(times) > MAX_WINDOW_ENTRIES:
            self._fold()

    def _fold(self) -> None:
        """Keep the last entry of each cell of time (and the last entry): the window's bound. Only the entries since
        the last fold (and the last folded one, whose cell a new step may share) are read: O(new steps)."""
        cell_s = self.window_s / (MAX_WINDOW_ENTRIES // 2)
        start = max(self._folded - 1, 0)
        keys = [int(t // cell_s) for t in self._times[start:]]
        keep = [start + i for i in range(len(keys) - 1) if keys[i] != keys[i + 1]] + [len(self._times) - 1]
        for column in (self._times, self._cum, self._steps):
            column[start:] = [column[i] for i in keep]
        self._folded = len(self._times)

    def note_clock(self, session_s: float, train_s: float) -> None:
        """Add a phase-clock sample: session seconds now and training-only seconds so far."""
        if session_s <= self._clock[-1][0]:  # the clock holds a sample from the start on
            return
        self._clock.append((float(session_s), max(float(train_s), self._clock[-1][1])))
        while len(self._clock) > 2 and self._clock[1][0] <= self._start_s:
            self._clock.popleft()  # keep one sample at or before the window's start

    def train_s_at(self, session_s: float) -> float | None:
        """Training-only seconds at ``session_s``, interpolated between samples (``None`` past the last)."""
        samples = self._clock
        if session_s > samples[-1][0]:
            return None
        i = bisect_left(samples, session_s, key=lambda sample: sample[0])  # the first sample at or after it
        if i == 0:
            return samples[0][1]
        (t0_s, train0_s), (t1_s, train1_s) = samples[i - 1], samples[i]
        return train0_s + (session_s - t0_s) / (t1_s - t0_s) * (train1_s - train0_s)  # note_clock: t1_s > t0_s

    def figures(self, rss_bytes: int | None = None, now_s: float | None = None) -> RecentFigures | None:
        """The window's figures, or ``None`` before the first step; ``now_s`` (session seconds): a stall ends the
        window now."""
        if not self._times:
            return None
        t_last = t_step = self._times[-1]
        span = t_last - self._start_s
        if span <= 0:
            return None
        tokens = self._cum[-1] - self._base
        steps = self._steps[-1] - self._steps_base
        gap_s = now_s - t_last if now_s is not None else 0.0
        stalled = gap_s >= max(STALL_MIN_S, 2 * span / steps)
        if stalled:
            t_last, span = now_s, now_s - self._start_s
        end, start = self.train_s_at(t_last), self.train_s_at(self._start_s)
        train_s = None if end is None or start is None else min(span, end - start)
        train_rate = tokens / train_s if train_s is not None and train_s > 0 else None
        # in a stall the pace falls as the window's rate does, unfolded (a young run's smoothed pace may still trail
        # its rising rate, and folding would raise it), so the ETA grows from the first stalled second on
        pace = self._pace if stalled else self._smooth(t_step)
        decay = (t_step - self._start_s) / span
        return RecentFigures(tokens_per_s=tokens / span, steps_per_s=steps / span, window_tokens=int(tokens),
                             window_steps=steps, window_s=span, t_s=t_last, rss_bytes=rss_bytes,
                             train_tokens_per_s=train_rate, window_train_s=train_s,
                             smoothed_steps_per_s=None if pace is None else pace[1] * decay,
                             smoothed_tokens_per_s=None if pace is None else pace[2] * decay,
                             stalled_s=gap_s if stalled else None)

    def _smooth(self, t_s: float) -> tuple[float, float, float] | None:
        """Fold the rates over the last min(``window_s``, age / 2) seconds of steps, as of the step ending at ``t_s``,
        into the smoothed pace, time constant min(:data:`PACE_TAU_S`, age / 4): age is the seconds since the run's
        first step, whose startup (imports, the model built, lazy init) is never in the pace; ``None`` before a second
        step (docs/spec.md section 5)."""
        age_s, last = t_s - self._first_s, self._pace  # figures(): a step was read
        i = bisect_left(self._times, t_s - min(self.window_s, age_s / 2))  # the first step in the pace's window
        if age_s <= 0 or (i == 0 and self._start_s < self._first_s):
            return last
        start_s, tokens, steps = ((self._times[i - 1], self._cum[i - 1], self._steps[i - 1]) if i
                                  else (self._start_s, self._base, self._steps_base))
        span = t_s - start_s
        steps_per_s, tokens_per_s = (self._steps[-1] - steps) / span, (self._cum[-1] - tokens) / span
        if last is None:
            self._pace = (t_s, steps_per_s, tokens_per_s)
        elif t_s > last[0]:
            alpha = 1.0 - math.exp(-(t_s - last[0]) / min(PACE_TAU_S, age_s / 4))
            self._pace = (t_s, last[1] + alpha * (steps_per_s - last[1]), last[2] + alpha * (tokens_per_s - last[2]))
        return self._pace


class RssReader:
    """Reads this process's RSS with psutil (``None`` without it). Publisher thread; about 20 us a read."""

    def __init__(self) -> None:
        self._process = None
        with suppress(Exception):
            import psutil

            self._process = psutil.Process()

    def read(self) -> int | None:
        """Current RSS in bytes, or ``None``."""
        with suppress(Exception):  # no psutil (None has no memory_info), or the read failed
            return int(self._process.memory_info().rss)  # type: ignore[union-attr]
        return None
