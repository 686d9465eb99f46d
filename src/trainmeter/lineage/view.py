"""The lineage wing's published view: what the training had done at the step this run resumed from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LineageView:
    """The training's counts at the resumed step (docs/spec.md section 22): ``steps_before`` optimizer steps and
    ``tokens_before`` tokens or samples (``None``: the parent's were not read). Any thread."""

    steps_before: int
    tokens_before: int | None


def training_counts(context: Any, steps: int, tokens: int | None) -> tuple[int, int | None]:
    """``steps`` and ``tokens`` of this run as counts of the training: the parent's at the resumed step added when the
    run resumes one (``tokens`` ``None`` when either is unknown); this run's own otherwise."""
    view = context.extension("lineage")
    if not isinstance(view, LineageView):
        return steps, tokens
    before = view.tokens_before
    return steps + view.steps_before, None if tokens is None or before is None else tokens + before
