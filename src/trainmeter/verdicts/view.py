"""The verdicts wing's published view: the verdicts fired so far."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VerdictsView:
    """What other wings read of the verdicts (any thread): ``{kind, step, sentence}`` per verdict, in firing order."""

    verdicts: tuple[dict[str, object], ...]
