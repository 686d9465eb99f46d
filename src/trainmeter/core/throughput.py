"""Throughput summaries: pure functions of counts and seconds (docs/spec.md section 3); zero seconds give ``None``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalSummary:
    """One reporting window: tokens (or samples), steps attempted, training-only seconds and their ratios."""

    tokens: int
    steps: int
    train_s: float
    train_tokens_per_s: float | None
    seconds_per_step: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """The session so far: tokens, session seconds and ``tokens / elapsed_s`` (``None`` at 0 s)."""

    tokens: int
    elapsed_s: float
    session_tokens_per_s: float | None


def ratio(numerator: float, denominator: float) -> float | None:
    """Return ``numerator / denominator``, or ``None`` when the denominator is not positive."""
    if denominator <= 0:
        return None
    return numerator / denominator


def interval_summary(*, tokens: int, steps: int, train_s: float) -> IntervalSummary:
    """Summarise a window from its tokens, attempted steps and training seconds."""
    return IntervalSummary(tokens=tokens, steps=steps, train_s=train_s, train_tokens_per_s=ratio(tokens, train_s),
                           seconds_per_step=ratio(train_s, steps))


def session_summary(*, tokens: int, elapsed_s: float) -> SessionSummary:
    """Summarise the session from new tokens and elapsed session seconds."""
    return SessionSummary(tokens=tokens, elapsed_s=elapsed_s, session_tokens_per_s=ratio(tokens, elapsed_s))
