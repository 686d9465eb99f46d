"""Chart markers for verdicts: ``{kind, step, label, sentence, chart}``, one per verdict, where the trouble began.

``chart`` is the chart whose curve shows it: ``loss`` (non-finite loss, spike), ``memory`` (creep), else
``throughput`` (each other kind is a loss of training speed). Pure functions of the verdict dicts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

MAX_MARKERS = 16  # markers sent to the widget at most (each verdict kind fires once: 8 today)

LABELS: dict[str, str] = {"loss_nonfinite": "loss NaN/inf", "loss_spike": "loss spike",
                          "throughput_drop": "throughput drop", "memory_creep": "memory creep",
                          "data_starved": "data-starved", "eval_heavy": "eval-heavy",
                          "checkpoint_heavy": "checkpoint-heavy", "gpu_util_misleading": "GPU-Util misleading"}
CHARTS: dict[str, str] = {"loss_nonfinite": "loss", "loss_spike": "loss", "memory_creep": "memory"}  # else throughput


def marker(verdict: dict[str, Any]) -> dict[str, Any] | None:
    """The marker of one verdict dict, or ``None`` when it has no step."""
    step = verdict.get("step")
    if not isinstance(step, int | float) or isinstance(step, bool):
        return None
    kind = str(verdict.get("kind") or "verdict")
    label = verdict.get("label") or LABELS.get(kind, kind.replace("_", " "))  # a marker's own label and chart
    chart = verdict.get("chart") or CHARTS.get(kind, "throughput")  # win (an alert's: alerts/extension.py)
    return {"kind": kind, "step": int(step), "label": str(label), "sentence": str(verdict.get("sentence") or ""),
            "chart": str(chart)}


def markers(verdicts: Iterable[Any]) -> list[dict[str, Any]]:
    """Markers of ``verdicts`` in the order they fired, at most :data:`MAX_MARKERS`."""
    found = (marker(v) for v in verdicts if isinstance(v, dict))
    return list(itertools.islice((m for m in found if m is not None), MAX_MARKERS))
