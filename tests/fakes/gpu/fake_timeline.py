"""The fake GPU backend's timelines: the levels a device holds at a time, and their integrals over time.

A timeline is a sequence of :class:`~tests.fakes.gpu.fake_profiles.Phase` objects, each holding its levels for
its duration; the last phase holds forever. GPM values and the energy counter are integrals of the levels, so
what a test reads back is exactly what it scripted. Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tests.fakes.gpu.fake_profiles import Levels, Phase


def levels_at(phases: Sequence[Phase], t_s: float) -> Levels:
    """The levels held ``t_s`` seconds after the timeline began (the last phase's from its end on)."""
    for phase in phases:
        if t_s < phase.duration_s:
            return phase.levels
        t_s -= phase.duration_s
    return phases[-1].levels


def integrals_at(phases: Sequence[Phase], t_s: float, names: Iterable[str]) -> dict[str, float]:
    """The integral of each level in ``names`` from the timeline's start to ``t_s`` seconds (level x seconds)."""
    sums = dict.fromkeys(names, 0.0)
    remaining = max(t_s, 0.0)
    for i, phase in enumerate(phases):
        span = remaining if i == len(phases) - 1 else min(remaining, phase.duration_s)
        for name in sums:
            sums[name] += getattr(phase.levels, name) * span
        remaining -= span
        if remaining <= 0:
            break
    return sums
