"""Saved runs: load one by path, list those under a run root."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.record.runlog import read_events


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A saved run folder.

    Attributes:
        dir: The run folder.
        passport: The passport dict (empty while the run has none yet, e.g. killed).
    """

    dir: Path
    passport: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The run's name."""
        return str(self.passport.get("name") or self.dir.name)

    @property
    def status(self) -> str:
        """``completed``, ``interrupted``, ``failed``, or ``unfinished`` without a passport."""
        return str(self.passport.get("status") or "unfinished")

    def events(self) -> list[dict[str, Any]]:
        """The run log's records (none for a launch folder whose ranks each keep their own log)."""
        path = self.dir / "events.jsonl"
        return read_events(path) if path.exists() else []

    def __repr__(self) -> str:
        return f"Run({self.name!r}, status={self.status!r}, dir={str(self.dir)!r})"


def load(path: str | Path) -> Run:
    """Load a saved run from its folder, its ``passport.json`` or its ``events.jsonl``.

    Raises:
        FileNotFoundError: When ``path`` holds no run (names the path).
    """
    p = Path(path)
    if p.is_file():
        p = p.parent
    if not (p / "events.jsonl").exists() and not (p / "passport.json").exists():
        raise FileNotFoundError(f"no trainmeter run at {str(path)!r}: expected a folder with events.jsonl or passport.json")
    passport: dict[str, Any] = {}
    if (p / "passport.json").exists():
        passport = json.loads((p / "passport.json").read_text(encoding="utf-8"))
    return Run(dir=p, passport=passport)


def runs(root: str | Path | None = None) -> list[Run]:
    """Return saved runs under ``root`` (default ``.trainmeter/runs``), oldest first."""
    base = Path(root) if root is not None else DEFAULT_RUN_ROOT
    if not base.is_dir():
        return []
    found = []
    for child in sorted(base.iterdir()):
        if child.is_dir() and ((child / "events.jsonl").exists() or (child / "passport.json").exists()):
            try:
                found.append(load(child))
            except (OSError, ValueError):
                continue
    return found


def format_runs(found: list[Run]) -> str:
    """One line per run: folder, status, steps, tokens."""
    if not found:
        return "no saved runs"
    lines = []
    for run in found:
        p = run.passport
        ranks = (p.get("distributed") or {}).get("ranks_recorded")
        lines.append(f"{run.dir}  {run.status:<11} steps={p.get('steps', '-')}  tokens={p.get('tokens', '-')}"
                     + (f"  ranks={ranks}" if ranks else ""))
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
