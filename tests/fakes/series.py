"""A step of the tokens-per-step series as the step rule records it (core/steps.py), for tests of the series alone."""

from __future__ import annotations

from trainmeter.core.series import StepSeries


def step_append(series: StepSeries, step: int, t_s: float, tokens: int) -> None:
    """Record step ``step`` (the next one) at ``t_s`` with ``tokens`` tokens."""
    if tokens != series.tokens:
        series.set_tokens(tokens, step)
    series.times.append(t_s)
