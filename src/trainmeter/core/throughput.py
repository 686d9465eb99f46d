"""Throughput summaries: pure functions of counts and seconds (docs/spec.md section 3).

Training-only figures divide by training seconds; session figures divide by
session elapsed seconds, which also hold eval, checkpoint, data waits and
reporting. A zero duration gives ``None``, never inf or 0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalSummary:
    """One reporting window.

    Attributes:
        tokens: Tokens (or samples) trained in the window.
        steps: Optimizer steps attempted in the window.
        train_s: Training-only seconds in the window.
        train_tokens_per_s: ``tokens / train_s`` or ``None``.
        seconds_per_step: ``train_s / steps`` or ``None``.
    """

    tokens: int
    steps: int
    train_s: float
    train_tokens_per_s: float | None
    seconds_per_step: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """The session so far.

    Attributes:
        tokens: Tokens trained since the run began.
        elapsed_s: Session seconds since the run began.
        session_tokens_per_s: ``tokens / elapsed_s`` or ``None``.
    """

    tokens: int
    elapsed_s: float
    session_tokens_per_s: float | None


def ratio(numerator: float, denominator: float) -> float | None:
    """Return ``numerator / denominator``, or ``None`` when the denominator is not positive.

    Examples:
        >>> ratio(10, 4)
        2.5
        >>> ratio(10, 0) is None
        True
    """
    if denominator <= 0:
        return None
    return numerator / denominator


def interval_summary(*, tokens: int, steps: int, train_s: float) -> IntervalSummary:
    """Summarise a window from its tokens, attempted steps and training seconds."""
    return IntervalSummary(
        tokens=tokens,
        steps=steps,
        train_s=train_s,
        train_tokens_per_s=ratio(tokens, train_s),
        seconds_per_step=ratio(train_s, steps) if steps > 0 else None,
    )


def session_summary(*, tokens: int, elapsed_s: float) -> SessionSummary:
    """Summarise the session from new tokens and elapsed session seconds."""
    return SessionSummary(tokens=tokens, elapsed_s=elapsed_s, session_tokens_per_s=ratio(tokens, elapsed_s))
