"""Lines to compare: one run's curve for one y against one x, decimated to a point budget (docs/spec.md section 15);
a training as one curve (a resumed run's curves joined with its earlier runs', sections 15 and 22).

Pure functions over a run's passport and curves document; no plotting library.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.comparison.extension import CURVES_FILE, curves_from_events, interpolate, write_curves
from trainmeter.core.decimate import decimate
from trainmeter.lineage.view import earlier_runs
from trainmeter.record.events import LOG_FILE
from trainmeter.record.runs import load
from trainmeter.record.safe_read import open_regular, read_json

X_KINDS = ("tokens", "flops", "time", "step")
Y_KINDS = ("train_loss", "val_loss", "tokens_per_s", "mfu")
EMPTY_CURVES: dict[str, Any] = {
    "series": {}, "reports": {"step": [], "tokens": [], "elapsed_s": [], "tokens_per_s": []}, "mfu": {}}
"""The curves of a run with none readable."""
CURVES_TYPES: dict[str, tuple[type, ...]] = {"series": (dict,), "reports": (dict,), "mfu": (dict,),
                                             "events_bytes": (int,)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """One run's line (``run``: the legend label; ``x`` and ``y`` of one length, NaN a gap), or why it has none."""

    run: str
    x: list[float]
    y: list[float]
    missing: str | None = None


def load_curves(run: Any) -> dict[str, Any]:
    """A run's curves document: ``curves.json``, else built from ``events.jsonl`` (cached for finished runs); a
    damaged file reads as no curves."""
    path = run.dir / CURVES_FILE
    events = run.dir / LOG_FILE
    size = None
    with contextlib.suppress(OSError), open_regular(events) as f:  # missing, or not a regular file: None
        size = os.fstat(f.fileno()).st_size
    with contextlib.suppress(OSError):  # missing, or damaged (Damaged): built again from the log
        doc = read_json(path, types=CURVES_TYPES)
        if doc.get("events_bytes") is None or size is None or size == doc["events_bytes"]:
            return doc
    if size is None or run.damaged:
        return dict(EMPTY_CURVES)
    try:
        doc = curves_from_events(events)
    except OSError:
        return dict(EMPTY_CURVES)
    if run.passport.get("status"):  # finished: cache it (keyed on the log's size)
        doc["events_bytes"] = size
        with contextlib.suppress(OSError):
            write_curves(run.dir, doc)
    return doc


def convention_of(passport: dict[str, Any], convention: str | None) -> str | None:
    """The FLOPs convention to use: the one asked for, else the run's own, else the one its MFU tile showed
    (compute/card.py: ``counted`` for a model with no convention, else the lowest of the range over conventions)."""
    compute = passport.get("compute") or {}
    if convention or compute.get("convention"):
        return convention or compute.get("convention")
    mfu = compute.get("mfu") if isinstance(compute.get("mfu"), dict) else {}
    if compute.get("conventions_missing"):
        return "counted" if mfu.get("counted") is not None else None
    shown = {c: v for c, v in mfu.items() if c != "counted" and isinstance(v, int | float)}
    return min(shown, key=shown.__getitem__) if shown else None


def x_label(x: str, unit: str, convention: str | None) -> str:
    """Axis label naming the unit (and the FLOPs convention)."""
    return {"tokens": f"{unit} trained", "step": "optimizer step", "time": "session time (s)",
            "flops": f"training FLOPs ({convention or 'no convention'} convention)"}[x]


def y_label(y: str, unit: str, convention: str | None) -> str:
    """Axis label naming the unit (and the MFU convention)."""
    return {"train_loss": "train_loss", "val_loss": "val_loss", "tokens_per_s": f"training-only {unit}/s",
            "mfu": f"MFU ({convention or 'no convention'}, 0-1)"}[y]


def make_line(name: str, passport: dict[str, Any], doc: dict[str, Any], x: str, y: str,
              convention: str | None, budget_points: int) -> Line:
    """The line of run ``name`` for ``y`` against ``x``, at most ``budget_points`` points."""
    conv = convention_of(passport, convention)
    fpt, col = None, {"step": "step", "time": "elapsed_s", "tokens": "tokens", "flops": "tokens"}[x]
    if x == "flops":
        fpt = ((passport.get("compute") or {}).get("flops_per_token") or {}).get(conv) if conv else None
        if fpt is None:
            why = "no FLOPs convention named" if conv is None else f"no FLOPs per token under {conv}"
            return Line(run=name, x=[], y=[], missing=why)
    reports = doc.get("reports") or {}
    if y in ("train_loss", "val_loss"):
        s = (doc.get("series") or {}).get(y)
        if not s or not s.get("step"):
            return Line(run=name, x=[], y=[], missing=f"no {y} recorded")
        if x != "step" and not reports.get("step"):
            return Line(run=name, x=[], y=[], missing="no report rows to place the points on this axis")
        xs = [float(v) for v in s["step"]]
        ys = [float("nan") if v is None else float(v) for v in s["value"]]
        if x != "step":  # the report rows' column at each point's step, piecewise linear from (0, 0)
            xs = interpolate(xs, [0.0, *map(float, reports["step"])], [0.0, *map(float, reports[col])])
            xs = [v * fpt for v in xs] if fpt is not None else xs
    else:
        if y == "mfu" and conv is None:
            return Line(run=name, x=[], y=[], missing="MFU needs a named convention")
        values = ((doc.get("mfu") or {}).get(conv) if y == "mfu" else reports.get("tokens_per_s")) or []
        keep = [i for i, v in enumerate(values) if v is not None]
        if not keep:
            why = (passport.get("compute") or {}).get("mfu_missing") if y == "mfu" else None
            return Line(run=name, x=[], y=[], missing=f"no {y} recorded" + (f" ({why})" if why else ""))
        xs = [float(reports[col][i]) * (fpt if fpt is not None else 1.0) for i in keep]
        ys = [float(values[i]) for i in keep]
    if len(xs) > budget_points:
        xs, ys = decimate(xs, ys, budget_points)
    return Line(run=name, x=xs, y=ys)


def training_curves(run_dir: Path, passport: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The curves of the training run ``run_dir`` (with ``passport`` and curves ``doc``) ends: each earlier run's
    points and report rows up to the step the next resumed from, then its own; loss points and rows at steps of the
    training (as recorded), tokens of the training (``None`` where a run's were not counted), session seconds summed
    over the runs (restart time left out). ``doc`` itself when the run resumed none."""
    earlier = earlier_runs(run_dir, (passport.get("lineage") or {}).get("runs"))
    if not earlier:
        return doc
    parts = []
    for folder, upto in earlier:
        try:
            run = load(folder)
            parts.append((run.passport, load_curves(run), upto))
        except (OSError, ValueError):  # gone or damaged: that part of the curve is missing
            parts.append(({}, dict(EMPTY_CURVES), upto))
    parts.append((passport, doc, None))
    series: dict[str, dict[str, list[Any]]] = {}
    rows: dict[str, list[Any]] = {c: [] for c in EMPTY_CURVES["reports"]}
    mfu: dict[str, list[Any]] = {}
    t0_s = 0.0
    for p, d, upto in parts:
        for name, s in (d.get("series") or {}).items():
            keep = [i for i, step in enumerate(s.get("step") or []) if upto is None or step <= upto]
            joined = series.setdefault(name, {"step": [], "value": []})
            joined["step"] += [s["step"][i] for i in keep]
            joined["value"] += [s["value"][i] for i in keep]
        reports, before = d.get("reports") or {}, (p.get("lineage") or {}).get("before")
        before = before.get("tokens") if isinstance(before, dict) else 0  # the training's when the run began
        keep = [i for i, step in enumerate(reports.get("step") or []) if upto is None or step <= upto]
        n = len(rows["step"])
        rows["step"] += [reports["step"][i] for i in keep]
        rows["tokens"] += [None if before is None else before + reports["tokens"][i] for i in keep]
        rows["elapsed_s"] += [t0_s + reports["elapsed_s"][i] for i in keep]
        rows["tokens_per_s"] += [reports["tokens_per_s"][i] for i in keep]
        for conv, values in (d.get("mfu") or {}).items():
            mfu.setdefault(conv, [None] * n).extend(values[i] for i in keep)
        for values in mfu.values():
            values.extend([None] * (len(rows["step"]) - len(values)))
        t0_s = rows["elapsed_s"][-1] if rows["elapsed_s"] else t0_s
    return {"series": series, "reports": rows, "mfu": mfu}
