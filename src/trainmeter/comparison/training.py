"""A training as one curve for ``tm.compare``: a resumed run's curves joined with its earlier runs' (docs/spec.md
sections 15 and 22). Pure reads of saved runs; any thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainmeter.comparison.lines import EMPTY_CURVES, load_curves
from trainmeter.lineage.view import earlier_runs
from trainmeter.record.runs import load


def _tokens_before(passport: dict[str, Any]) -> Any:
    """The training's tokens when the run began (0 for a first run; ``None``: unknown)."""
    before = (passport.get("lineage") or {}).get("before")
    return before.get("tokens") if isinstance(before, dict) else 0


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
        reports, before = d.get("reports") or {}, _tokens_before(p)
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
