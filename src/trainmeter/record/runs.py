"""Saved runs: load one by path, list those under a run root, and the ``%trainmeter runs`` table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainmeter.core.text import printable
from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.record.events import HEAD_BYTES, LOG_FILE, TAIL_BYTES, ReadStats, Record, head, read_events, tail
from trainmeter.sizes import format_count, format_duration, format_number


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

    def events(self) -> list[Record]:
        """The run log's records (none for a launch folder whose ranks each keep their own log)."""
        path = self.dir / LOG_FILE
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
    if not (p / LOG_FILE).exists() and not (p / "passport.json").exists():
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
    return Run(dir=p, passport=summarise_log(p / LOG_FILE, problem))


def summarise_log(path: Path, problem: str | None = None) -> dict[str, Any]:
    """A passport-shaped summary of a run from its run log alone (a killed run).

    What the log still holds is summarised; damaged lines in it are skipped and said in the warnings.
    """
    read = ReadStats()
    try:
        events = read_events(path, stats=read) if path.exists() else []
    except OSError:
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
    damaged = ([f"its run log is damaged: {read.lines_skipped} unreadable lines skipped"]
               if read.lines_skipped else [])
    return {
        "name": start.get("name"), "status": end.get("status") or "unfinished", "error": end.get("error"),
        "started_at": start.get("started_at"), "ended_at": end.get("ended_at"),
        "elapsed_s": last.get("elapsed_s"), "steps": last_step if last_step is not None else 0,
        "tokens": last.get("tokens") or 0, "token_unit": last.get("token_unit") or "tokens",
        "phases_s": last.get("phases_s") or {}, "throughput": last.get("throughput") or {},
        "memory": last.get("memory") or {}, "series": stats, "options": start.get("options") or {},
        "warnings": [f"{why}; figures are from its run log's last report", *damaged],
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
            if child.is_dir() and ((child / LOG_FILE).exists() or (child / "passport.json").exists()):
                found.append(load(child))
        except (OSError, ValueError):
            continue
    return found


RUNS_SHOWN = 20
"""Runs ``%trainmeter runs`` lists by default (newest first); older ones are counted in a ``+N more`` line."""
RUN_COLUMNS: tuple[str, ...] = ("started (UTC)", "name", "status", "duration", "steps", "tokens", "last loss", "path")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRow:
    """One row of the runs table, every cell already formatted (``-`` where unknown).

    Attributes:
        started: UTC start, ``YYYY-MM-DD HH:MM``.
        name: Run name.
        status: ``completed`` ... ``unfinished``; ``(N ranks)`` appended for a launch.
        duration: Session length ``h:mm:ss`` (to the last report for a run without a passport).
        steps: Optimizer steps (SI count).
        tokens: Tokens (or samples) with :func:`~trainmeter.sizes.format_count`.
        last_loss: Last ``train_loss``.
        path: The run folder.
        from_log: Whether the figures come from the run log (no passport).
    """

    started: str
    name: str
    status: str
    duration: str
    steps: str
    tokens: str
    last_loss: str
    path: str
    from_log: bool = False

    def cells(self) -> tuple[str, ...]:
        """The cells in :data:`RUN_COLUMNS` order."""
        return (self.started, self.name, self.status, self.duration, self.steps, self.tokens, self.last_loss,
                self.path)


@dataclass(frozen=True, slots=True)
class RunsTable:
    """The runs table: an HTML table in a notebook (``_repr_html_``), plain text elsewhere.

    Attributes:
        rows: Newest first, at most the number asked for.
        more: Older runs left out.
        root: The run root listed.
    """

    rows: tuple[RunRow, ...]
    more: int
    root: str

    def text(self) -> str:
        """The plain-text table (aligned columns, control characters escaped)."""
        if not self.rows:
            return f"no saved runs under {printable(self.root)}"
        table = [RUN_COLUMNS] + [tuple(printable(c) for c in r.cells()) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(RUN_COLUMNS))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
        lines += self._notes()
        return "\n".join(lines)

    def _notes(self) -> list[str]:
        notes = []
        if self.more:
            notes.append(f"+{self.more} more (older); %trainmeter runs --all lists every run")
        if any(r.from_log for r in self.rows):
            notes.append("* no passport: figures from the run log's last report")
        return notes

    def _repr_html_(self) -> str:
        from html import escape

        if not self.rows:
            return f"<p>{escape(self.text())}</p>"
        head = "".join(f'<th style="text-align:left">{escape(c)}</th>' for c in RUN_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f'<td style="text-align:{"right" if i in (3, 4, 5, 6) else "left"}">'
                             f'{escape(printable(c))}</td>' for i, c in enumerate(r.cells())) + "</tr>"
            for r in self.rows)
        notes = "".join(f"<div><small>{escape(n)}</small></div>" for n in self._notes())
        return f'<table class="trainmeter-runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}'

    def __repr__(self) -> str:
        return self.text()


def runs_table(root: str | Path | None = None, limit: int | None = RUNS_SHOWN) -> RunsTable:
    """The runs under ``root`` (default ``.trainmeter/runs``), newest first, at most ``limit`` (``None``: all).

    Reads each listed run's passport, or, for a run without one (killed), the first
    64 KiB and the last 256 KiB of its ``events.jsonl``: bounded whatever the log's size.
    Runs past ``limit`` are only counted. A damaged folder is a row, never an error.
    """
    base = Path(root).expanduser() if root is not None else DEFAULT_RUN_ROOT
    try:
        children = [c for c in base.iterdir() if c.is_dir()
                    and ((c / LOG_FILE).exists() or (c / "passport.json").exists())]
    except OSError:
        children = []
    children.sort(key=lambda c: c.name, reverse=True)  # folders are named <UTC stamp>-<name>
    shown = children if limit is None else children[:limit]
    return RunsTable(rows=tuple(run_row(c) for c in shown), more=len(children) - len(shown), root=str(base))


def run_row(folder: Path) -> RunRow:
    """The table row of one run folder (never raises on a damaged folder)."""
    passport: dict[str, Any] = {}
    try:
        loaded = json.loads((folder / "passport.json").read_text(encoding="utf-8"))
        passport = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError, UnicodeDecodeError):
        passport = {}
    from_log = not passport
    p = passport or log_tail_summary(folder / LOG_FILE)
    loss = ((p.get("series") or {}).get("train_loss") or {}).get("last") if not from_log else p.get("last_loss")
    unit = p.get("token_unit") or "tokens"
    tokens = p.get("tokens")
    ranks = (p.get("distributed") or {}).get("ranks_recorded")
    status = str(p.get("status") or "unfinished") + (f" ({ranks} ranks)" if ranks else "") + (" *" if from_log else "")
    return RunRow(
        started=_started(p.get("started_at"), folder.name), name=str(p.get("name") or folder.name), status=status,
        duration=format_duration(p.get("elapsed_s")) if _finite(p.get("elapsed_s")) else "-",
        steps=format_count(p.get("steps")) if _finite(p.get("steps")) else "-",
        tokens=(format_count(tokens) + ("" if unit == "tokens" else f" {unit}")) if _finite(tokens) else "-",
        last_loss=format_number(loss) if _finite(loss) else "-", path=_shown_path(folder), from_log=from_log)


def log_tail_summary(path: Path, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> dict[str, Any]:
    """Name, start, status and the last report's figures of a run log, from its head and tail only.

    A torn last line (the process was killed mid-write) and a line cut by the tail
    window are skipped. Keys as in a passport, plus ``last_loss``.
    """
    starts = head(path, 1, max_bytes=head_bytes, kinds=("start",))
    start: dict[str, Any] = dict(starts[0]) if starts else {}
    found: dict[str, dict[str, Any]] = {}
    last_loss = None
    for r in reversed(tail(path, max_bytes=tail_bytes)):
        kind = r.get("kind")
        if kind in ("interval", "end") and kind not in found:
            found[kind] = r
        if last_loss is None and kind == "series" and r.get("name") == "train_loss":
            last_loss = next((v for v in reversed(r.get("value") or []) if _finite(v)), None)
    last, end = found.get("interval", {}), found.get("end", {})
    return {"name": start.get("name"), "started_at": start.get("started_at"),
            "status": end.get("status") or "unfinished", "elapsed_s": last.get("elapsed_s"),
            "steps": last.get("step"), "tokens": last.get("tokens"),
            "token_unit": last.get("token_unit") or "tokens", "last_loss": last_loss}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _started(started_at: Any, folder_name: str) -> str:
    when = None
    if isinstance(started_at, str):
        try:
            when = datetime.fromisoformat(started_at)
        except ValueError:
            when = None
    if when is None:
        try:
            when = datetime.strptime(folder_name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            return "-"
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M")


def _shown_path(folder: Path) -> str:
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(folder)


def format_runs(found: list[Run]) -> str:
    """The runs table (plain text) of already loaded runs, in the order given."""
    return RunsTable(rows=tuple(run_row(r.dir) for r in found), more=0, root="").text() if found else "no saved runs"


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
