"""Throughput summaries: pure functions of counts and seconds (docs/spec.md section 3); zero seconds give ``None``,
and so do tokens no batch was read for (unknown is never 0: docs/spec.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BATCH_CALL = "tm.batch(samples=..., tokens=...)"
"""The public call that declares what a batch holds where trainmeter cannot read it (named in every such message)."""
NO_BATCH_READ = f"no batch was read: declare each batch with {BATCH_CALL}"
"""Why a run's tokens are unknown, where no more is known (a report's record)."""
NO_RANK_READ = f"no rank read a batch: declare each with {BATCH_CALL}"
"""Why a launch's global tokens are unknown (docs/spec.md section 19)."""


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


def ratio(numerator: float | None, denominator: float) -> float | None:
    """``numerator / denominator``; ``None`` for an unknown numerator or a denominator not positive."""
    return None if numerator is None or denominator <= 0 else numerator / denominator


def interval_summary(*, tokens: int, steps: int, train_s: float, read: bool = True) -> IntervalSummary:
    """Summarise a window from its tokens, attempted steps and training seconds (``read``: was any batch read); a
    window with no step has no rate (tokens are counted at a step: a report at an emit, the final one)."""
    return IntervalSummary(tokens=tokens, steps=steps, train_s=train_s,
                           train_tokens_per_s=ratio(tokens, train_s) if read and steps else None,
                           seconds_per_step=ratio(train_s, steps))


def session_summary(*, tokens: int, elapsed_s: float, read: bool = True) -> SessionSummary:
    """Summarise the session from new tokens and elapsed session seconds (``read``: was any batch read)."""
    return SessionSummary(tokens=tokens, elapsed_s=elapsed_s,
                          session_tokens_per_s=ratio(tokens, elapsed_s) if read else None)


def tokens_missing(run: Any) -> str | None:
    """Why ``run``'s tokens (or samples) are unknown, naming the call that declares them; ``None`` once a batch was
    read (``run.token_unit`` set). Any thread (reads)."""
    if run.token_unit is not None:
        return None
    if getattr(run, "model_ref", None) is None:
        return f"no batch was read (no trained module was seen called): declare each batch with {BATCH_CALL}"
    return (f"no batch was read: the trained module's calls hold no tensor trainmeter reads (a custom batch object); "
            f"declare each batch with {BATCH_CALL}")
