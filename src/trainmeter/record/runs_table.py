"""The ``%trainmeter runs`` table: one bounded row per run folder (passport, else the run log's head and tail), the
runs of one training grouped (a resumed run under its parent, then the training's counts; docs/spec.md section 22).

A damaged folder is a row whose status says ``damaged: <why>``, never an error; a run with no end whose log fell silent
says ``killed``. Any thread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from html import escape
from pathlib import Path, PurePosixPath
from typing import Any

from trainmeter.core.text import printable
from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.record.events import HEAD_BYTES, LOG_FILE, PASSPORT_FILE, TAIL_BYTES, head, tail
from trainmeter.record.safe_read import NO_PASSPORT, clip, iso_time, open_regular, read_passport
from trainmeter.sizes import format_count, format_duration, format_number, format_percent

DAMAGE_SHOWN_CHARS = 72  # characters of a damaged run's reason shown in its status cell
SILENT_MARGIN_S = 5.0  # past two report intervals of silence, a run with no end record is killed (section 18)


def run_folders(base: Path) -> list[Path]:
    """The folders under ``base`` holding a run log or a passport (anything by that name), by name."""
    try:
        children = sorted(base.iterdir()) if os.path.isdir(base) else []
    except OSError:
        return []
    # os.path.isdir and lexists: False for anything they cannot stat, never raise
    return [c for c in children if os.path.isdir(c) and any(os.path.lexists(c / f) for f in (LOG_FILE, PASSPORT_FILE))]


RUNS_SHOWN = 20  # runs %trainmeter runs lists by default (newest first); older ones counted in a "+N more" line
RUN_COLUMNS: tuple[str, ...] = ("started (UTC)", "name", "status", "duration", "steps", "tokens", "last loss", "path")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRow:
    """One row of the runs table (docs/spec.md section 8, "Runs"), every cell formatted (``-`` where unknown);
    ``from_log``: the figures come from the run log (no passport); ``parent``: the folder name of the run it resumed;
    ``training``: its passport's ``lineage.training`` (section 22), for the training's row."""

    started: str
    name: str
    status: str
    duration: str
    steps: str
    tokens: str
    last_loss: str
    path: str
    from_log: bool = False
    parent: str | None = None
    training: dict[str, Any] | None = field(default=None, compare=False)

    def cells(self) -> tuple[str, ...]:
        """The cells in :data:`RUN_COLUMNS` order."""
        return (self.started, self.name, self.status, self.duration, self.steps, self.tokens, self.last_loss, self.path)


@dataclass(frozen=True, slots=True)
class RunsTable:
    """The runs table (``rows`` newest first, ``more`` older ones left out, the ``root`` listed): HTML or text."""

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
        return "\n".join(lines + self._notes())

    def _notes(self) -> list[str]:
        notes = []
        if self.more:
            notes.append(f"+{self.more} more (older); %trainmeter runs --all lists every run")
        if any(r.from_log for r in self.rows):
            notes.append("* no passport: figures from the run log's last report")
        return notes

    def _repr_html_(self) -> str:
        from trainmeter.widget.look import STATUS_COLOURS  # the alert colour (widget/colours.json)

        alert = f";color:{STATUS_COLOURS['failed']}"
        if not self.rows:
            return f"<p>{escape(self.text())}</p>"
        head = "".join(f'<th style="text-align:left">{escape(c)}</th>' for c in RUN_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f'<td style="text-align:{"right" if i in (3, 4, 5, 6) else "left"}'
                             f'{alert if c == "nan/inf" else ""}">'
                             f'{escape(printable(c))}</td>' for i, c in enumerate(r.cells())) + "</tr>"
            for r in self.rows)
        notes = "".join(f"<div><small>{escape(n)}</small></div>" for n in self._notes())
        return f'<table class="trainmeter-runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}'

    def __repr__(self) -> str:
        return self.text()


def runs_table(root: str | Path | None = None, limit: int | None = RUNS_SHOWN) -> RunsTable:
    """The runs under ``root`` (default ``.trainmeter/runs``), newest first, at most ``limit`` (``None``: all; the
    rest counted): each listed run's passport, else its log's head and tail (bounded). Never an error."""
    base = Path(root).expanduser() if root is not None else DEFAULT_RUN_ROOT
    children = run_folders(base)[::-1]  # newest first: folders are named <UTC stamp>-<name>
    shown = children if limit is None else children[:limit]
    return RunsTable(rows=grouped({c.name: run_row(c) for c in shown}), more=len(children) - len(shown), root=str(base))


def training_order(parents: dict[str, str | None]) -> list[tuple[str, int]]:
    """Run folder names (``parents``: each one's parent's, ``None`` for a first run) in trainings: each training's
    first run, then every run that resumed it under it (oldest first, with its depth), trainings newest first by their
    newest run; a run whose parent is not among them starts its own."""
    children: dict[str | None, list[str]] = {}
    for name in sorted(parents):
        parent = parents[name]
        children.setdefault(parent if parent in parents and parent != name else None, []).append(name)

    def walk(name: str, depth: int) -> Iterator[tuple[str, int]]:
        if depth <= len(parents):  # a cycle of parents (edited folders) ends here
            yield name, depth
            for child in children.get(name, []):
                yield from walk(child, depth + 1)

    blocks = sorted((list(walk(root, 0)) for root in children.get(None, [])), key=lambda b: max(n for n, _ in b),
                    reverse=True)
    return [item for block in blocks for item in block]


def grouped(rows: dict[str, RunRow]) -> tuple[RunRow, ...]:
    """The rows in :func:`training_order`, a resumed run's name marked ``└`` under its parent and, after the last run
    of a training, a row of the training's counts (its passport's ``lineage.training``)."""
    order = training_order({name: row.parent for name, row in rows.items()})
    has_child = {rows[name].parent for name, _ in order}
    out: list[RunRow] = []
    for name, depth in order:
        row = rows[name]
        out.append(row if not depth else replace(row, name="  " * (depth - 1) + "└ " + row.name))
        if row.training is not None and name not in has_child:
            out.append(_training_row(row.training, "  " * depth))
    return tuple(out)


def _training_row(t: dict[str, Any], indent: str) -> RunRow:
    """The row of one training's counts: steps, tokens, wall time, lost work, restart time and goodput."""
    unit = t.get("token_unit") or "tokens"
    status = (f"lost {format_count(t.get('lost_steps'))} steps, restart {format_duration(t.get('restart_s'))}, "
              f"goodput {format_percent(t.get('goodput'))}")
    return RunRow(started="", name=indent + "= training", status=status, duration=format_duration(t.get("wall_s")),
                  steps=format_count(t.get("steps")), last_loss="-", path="",
                  tokens=format_count(t.get("tokens")) + (f" {unit}" if unit != "tokens" and _finite(t.get("tokens"))
                                                          else ""))


def run_row(folder: Path) -> RunRow:
    """The table row of one run folder (never raises on a damaged folder: its status says ``damaged: why``)."""
    try:
        return _run_row(folder)
    except Exception as exc:
        return _damaged_row(folder, f"{type(exc).__name__}: {exc}")


def _damaged_row(folder: Path, reason: str) -> RunRow:
    return RunRow(started=_started(None, folder.name), name=folder.name, duration="-", steps="-", tokens="-",
                  status="damaged: " + clip(reason, DAMAGE_SHOWN_CHARS), last_loss="-", path=_shown_path(folder))


def _run_row(folder: Path) -> RunRow:
    passport: dict[str, Any] = {}
    damage = None
    try:
        passport = read_passport(folder)
    except OSError as exc:  # missing, or Damaged
        damage = None if isinstance(exc, FileNotFoundError) else str(exc)
    from_log = not passport
    p = passport or log_tail_summary(folder / LOG_FILE)
    if damage is None:  # the log's, or a passport's that lists a file the folder lacks
        damage = p.get("damaged")
    if damage is not None and not p.get("started_at") and not p.get("steps"):
        return _damaged_row(folder, damage)
    entry = (p.get("series") or {}).get("train_loss") or {}
    loss = entry.get("last") if not from_log else p.get("last_loss")
    nonfinite = not from_log and loss is None and entry.get("nonfinite")  # its last point: said, in red (section 12)
    unit = p.get("token_unit") or "tokens"
    tokens = p.get("tokens")
    ranks = (p.get("distributed") or {}).get("ranks_recorded")
    status = str(p.get("status") or "unfinished")
    if p.get("killed"):
        seen = _started(p.get("last_seen_at"), "", "%Y-%m-%d %H:%M:%S")
        status = f"killed (last seen {seen[11:] if seen[:10] == _started(p.get('started_at'), '')[:10] else seen})"
    status += (f" ({ranks} ranks)" if ranks else "") + (" *" if from_log else "")
    if damage is not None:
        status = "damaged: " + clip(damage, DAMAGE_SHOWN_CHARS)
    lineage = p.get("lineage") if isinstance(p.get("lineage"), dict) else {}
    training = lineage.get("training")
    return RunRow(started=_started(p.get("started_at"), folder.name), name=str(p.get("name") or folder.name),
                  status=status, duration=format_duration(p.get("elapsed_s")) if _finite(p.get("elapsed_s")) else "-",
                  steps=format_count(p.get("steps")) if _finite(p.get("steps")) else "-",
                  tokens=(format_count(tokens) + ("" if unit == "tokens" else f" {unit}")) if _finite(tokens) else "-",
                  last_loss=format_number(loss) if _finite(loss) else "nan/inf" if nonfinite else "-",
                  path=_shown_path(folder), from_log=from_log,
                  parent=parent_name(p), training=training if isinstance(training, dict) else None)


def parent_name(passport: dict[str, Any]) -> str | None:
    """The folder name of the run a passport's (or a log summary's) run resumed (its ``lineage.parent``, else its
    options' ``resume``: ``../<folder>``, a sibling under the run root), ``None`` for a first run."""
    lineage = passport.get("lineage") if isinstance(passport.get("lineage"), dict) else {}
    options = passport.get("options") if isinstance(passport.get("options"), dict) else {}
    rel = lineage.get("parent") or options.get("resume")
    if not isinstance(rel, str) or not rel.strip():
        return None
    parts = PurePosixPath(rel).parts
    return parts[1] if len(parts) == 2 and parts[0] == ".." else None


def log_tail_summary(path: Path, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> dict[str, Any]:
    """Name, start, status and the last report's figures of a run log, from its head and tail only (a torn or cut line
    skipped); keys as in a passport, plus ``last_loss``."""
    try:
        open_regular(path).close()
    except FileNotFoundError:
        pass
    except OSError as exc:  # Damaged included: head and tail would read it as empty
        return {"status": "damaged", "damaged": str(exc), "token_unit": "tokens"}
    starts = head(path, 1, max_bytes=head_bytes, kinds=("start",))
    start: dict[str, Any] = dict(starts[0]) if starts else {}
    found: dict[str, dict[str, Any]] = {}
    last_loss = None
    for r in reversed(tail(path, max_bytes=tail_bytes)):
        kind = r.get("kind")
        if kind in ("interval", "heartbeat", "end"):
            found.setdefault(kind, r)
        values = r.get("value")
        if last_loss is None and kind == "series" and r.get("name") == "train_loss" and isinstance(values, list):
            last_loss = next((v for v in reversed(values) if _finite(v)), None)
    last, end = found.get("interval", {}), found.get("end", {})
    return {"name": start.get("name"), "started_at": start.get("started_at"), "status": "damaged" if end else "unfinished",
            "damaged": NO_PASSPORT if end else None, **last_report(start, last, found.get("heartbeat", {}), end),
            "tokens": last.get("tokens"), "token_unit": last.get("token_unit") or "tokens", "last_loss": last_loss,
            "options": start.get("options") if isinstance(start.get("options"), dict) else {}}


def last_report(start: dict[str, Any], last: dict[str, Any], beat: dict[str, Any],
                end: dict[str, Any]) -> dict[str, Any]:
    """A passport's ``elapsed_s``, ``steps`` (``None``: neither counted), ``last_seen_at`` and ``killed`` of a run with
    no passport, from its last report and heartbeat (counted after that report). Last seen: its ``started_at`` plus
    that ``elapsed_s`` (ISO, to the second); killed: no ``end`` and last seen more than two report intervals (its
    options' ``interval_s``) plus :data:`SILENT_MARGIN_S` ago, as a live run writes a report or a heartbeat at least
    once an interval (docs/spec.md section 18)."""
    elapsed_s = max([r["elapsed_s"] for r in (last, beat) if _finite(r.get("elapsed_s"))], default=None)
    steps = max([c for c in (last.get("step"), beat.get("steps_done")) if _finite(c)], default=None)
    figures = {"elapsed_s": elapsed_s, "steps": steps, "last_seen_at": None, "killed": False}
    if (started := iso_time(start.get("started_at"))) is not None:
        seen = (started if started.tzinfo else started.replace(tzinfo=timezone.utc)) + timedelta(seconds=elapsed_s or 0)
        interval = (start.get("options") or {}).get("interval_s") if isinstance(start.get("options"), dict) else None
        silent_s = 2 * (interval if _finite(interval) and interval > 0 else 10.0) + SILENT_MARGIN_S
        figures.update(last_seen_at=seen.isoformat(timespec="seconds"),
                       killed=not end and (datetime.now(timezone.utc) - seen).total_seconds() > silent_s)
    return figures


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _started(started_at: Any, folder_name: str, form: str = "%Y-%m-%d %H:%M") -> str:
    when = iso_time(started_at)
    if when is None:
        try:
            when = datetime.strptime(folder_name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            return "-"
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime(form)


def _shown_path(folder: Path) -> str:
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(folder)
