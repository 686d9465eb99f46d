"""Saved runs: load one by path, list those under a run root."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainmeter.core.text import printable
from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.record.runlog import read_events


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A saved run folder.

    Attributes:
        dir: The run folder.
        passport: The passport dict; for a run without a readable passport (killed,
            or passport.json damaged), a summary of its run log with ``status``
            ``"unfinished"`` and ``summarised_from`` = ``"events.jsonl"``.
    """

    dir: Path
    passport: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The run's name."""
        return str(self.passport.get("name") or self.dir.name)

    @property
    def status(self) -> str:
        """``completed``, ``interrupted``, ``failed``, ``terminated``, or ``unfinished`` without a passport."""
        return str(self.passport.get("status") or "unfinished")

    @property
    def has_passport(self) -> bool:
        """Whether the figures come from a passport (else from the run log)."""
        return bool(self.passport) and "summarised_from" not in self.passport

    def events(self) -> list[dict[str, Any]]:
        """The run log's records (none for a launch folder whose ranks each keep their own log)."""
        path = self.dir / "events.jsonl"
        return read_events(path) if path.exists() else []

    def to_pandas(self) -> Any:
        """Series, steps and intervals as tidy DataFrames (``.series``, ``.steps``, ``.intervals``); needs pandas."""
        from trainmeter.record.export import to_pandas

        return to_pandas(self.dir)

    def export_tensorboard(self, logdir: str | Path) -> Path:
        """Write this run as a TensorBoard event file under ``logdir``; returns its path. Needs tensorboard."""
        from trainmeter.record.export import export_tensorboard

        return export_tensorboard(self.dir, self.passport, logdir)

    def export_wandb(self, project: str, mode: str = "offline", **kwargs: Any) -> Any:
        """Log this run to W&B (offline by default: nothing is sent); returns the finished run. Needs wandb."""
        from trainmeter.record.export import export_wandb

        return export_wandb(self.dir, self.passport, project=project, mode=mode, **kwargs)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, status={self.status!r}, dir={str(self.dir)!r})"


def load(path: str | Path) -> Run:
    """Load a saved run from its folder, its ``passport.json`` or its ``events.jsonl``.

    A run without a readable passport is summarised from its run log (last
    report's step, tokens, unit, phases; each series' last, min, max).

    Raises:
        FileNotFoundError: When ``path`` holds no run (names the path).
    """
    p = Path(path).expanduser()
    if p.is_file():
        p = p.parent
    if not (p / "events.jsonl").exists() and not (p / "passport.json").exists():
        raise FileNotFoundError(f"no trainmeter run at {str(path)!r}: expected a folder with events.jsonl or passport.json")
    problem = None
    if (p / "passport.json").exists():
        try:
            passport = json.loads((p / "passport.json").read_text(encoding="utf-8"))
            if isinstance(passport, dict) and passport:
                return Run(dir=p, passport=passport)
            problem = "passport.json holds no passport"
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            problem = f"passport.json unreadable ({type(exc).__name__}: {exc})"
    return Run(dir=p, passport=summarise_log(p / "events.jsonl", problem))


def summarise_log(path: Path, problem: str | None = None) -> dict[str, Any]:
    """A passport-shaped summary of a run from its run log alone (a killed run)."""
    try:
        events = read_events(path) if path.exists() else []
    except (OSError, UnicodeDecodeError):
        events = []
    start = next((e for e in events if e.get("kind") == "start"), {})
    last = next((e for e in reversed(events) if e.get("kind") == "interval"), {})
    end = next((e for e in reversed(events) if e.get("kind") == "end"), {})
    stats: dict[str, dict[str, Any]] = {}
    last_step = last.get("step")
    for e in events:
        if e.get("kind") == "steps" and e.get("step"):
            last_step = max(last_step or 0, max(e["step"]))
        if e.get("kind") != "series" or e.get("x", "step") != "step" or not isinstance(e.get("value"), list):
            continue
        values = [v for v in e["value"] if isinstance(v, (int, float))]
        if not values:
            continue
        st = stats.setdefault(str(e.get("name")), {"last": None, "min": None, "max": None, "count": 0, "last_step": None})
        st["last"] = values[-1]
        st["min"] = min(values) if st["min"] is None else min(st["min"], min(values))
        st["max"] = max(values) if st["max"] is None else max(st["max"], max(values))
        st["count"] += len(e["value"])
        st["last_step"] = (e.get("step") or [None])[-1]
    why = problem or "no passport: the run did not finish (kernel killed?)"
    return {
        "name": start.get("name"), "status": end.get("status") or "unfinished", "error": end.get("error"),
        "started_at": start.get("started_at"), "ended_at": end.get("ended_at"),
        "elapsed_s": last.get("elapsed_s"), "steps": last_step if last_step is not None else 0,
        "tokens": last.get("tokens") or 0, "token_unit": last.get("token_unit") or "tokens",
        "phases_s": last.get("phases_s") or {}, "throughput": last.get("throughput") or {},
        "memory": last.get("memory") or {}, "series": stats, "options": start.get("options") or {},
        "warnings": [f"{why}; figures are from its run log's last report"],
        "summarised_from": "events.jsonl",
    }


def runs(root: str | Path | None = None) -> list[Run]:
    """Return saved runs under ``root`` (default ``.trainmeter/runs``), oldest first.

    A damaged run folder is listed (summarised from what is readable), never an error.
    """
    base = Path(root).expanduser() if root is not None else DEFAULT_RUN_ROOT
    if not base.is_dir():
        return []
    found = []
    for child in sorted(base.iterdir()):
        try:
            if child.is_dir() and ((child / "events.jsonl").exists() or (child / "passport.json").exists()):
                found.append(load(child))
        except (OSError, ValueError):
            continue
    return found


def format_runs(found: list[Run]) -> str:
    """One line per run: folder, status, steps, tokens (from the run log when there is no passport)."""
    if not found:
        return "no saved runs"
    lines = []
    for run in found:
        p = run.passport
        unit = "samples" if p.get("token_unit") == "samples" else "tokens"
        source = "" if run.has_passport else "  (from the run log)"
        ranks = (p.get("distributed") or {}).get("ranks_recorded")
        lines.append(printable(f"{run.dir}  {run.status:<11} steps={p.get('steps', '-')}  "
                               f"{unit}={p.get('tokens', '-')}" + (f"  ranks={ranks}" if ranks else "") + source))
    return "\n".join(lines)


def make_run_dir(root: Path, name: str, now: datetime) -> Path:
    """Create and return ``<root>/<UTC timestamp>-<name>`` (suffixed if taken)."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root.mkdir(parents=True, exist_ok=True)
    candidate = root / f"{stamp}-{name}"
    n = 2
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate = root / f"{stamp}-{name}-{n}"
            n += 1
