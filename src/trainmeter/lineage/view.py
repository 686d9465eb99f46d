"""The lineage wing's published view: what the training had done at the step this run resumed from, and the earlier
runs' curves read back from their logs (the dashboard's whole training, docs/spec.md section 22)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.record.events import LOG_FILE, iter_events
from trainmeter.record.runs import REPLAY_MAX_BYTES

PARENT_LOSS = "train_loss.parent"
"""The training loss of the earlier runs of a resumed run's training: drawn faint before its own, never recorded."""


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


def step_origin(steps_record: Any) -> int | None:
    """The step a run's axis starts from, read from its log's first ``steps`` record (its first step's, less one: 0,
    or a resumed run's step of the training, docs/spec.md section 22); ``None`` when unreadable."""
    first = (steps_record.get("step") or [None])[0]
    return first - 1 if isinstance(first, int) else None


def earlier_runs(folder: Path, runs: Any) -> list[tuple[Path, int]]:
    """The earlier runs of a training and the step of the training up to which each counts (where the next resumed):
    ``runs`` as a passport's ``lineage.runs`` (paths relative to ``folder``; the resuming run last)."""
    runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
    return [(folder / run["path"], after["resumed_from_step"]) for run, after in zip(runs, runs[1:], strict=False)
            if isinstance(run.get("path"), str) and isinstance(after.get("resumed_from_step"), int)]


def earlier_points(runs: list[tuple[Path, int]], name: str = "train_loss") -> Iterator[tuple[list[int], list[Any]]]:
    """Series ``name``'s points in each earlier run's log up to the step the next run resumed from (steps of the
    training: one axis), a record at a time; a log that cannot be read gives none. Any thread."""
    for folder, upto in runs:
        try:
            for e in iter_events(folder / LOG_FILE, kinds=("series",), max_bytes=REPLAY_MAX_BYTES):
                steps, values = e.get("step"), e.get("value")
                if e.get("name") == name and e.get("x", "step") == "step" and isinstance(steps, list) \
                        and isinstance(values, list):
                    if kept := [i for i, s in enumerate(steps) if isinstance(s, int) and s <= upto]:
                        yield [steps[i] for i in kept], [values[i] for i in kept]
        except OSError:  # missing or damaged: the run's own passport says so
            continue
