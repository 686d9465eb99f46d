"""Saved runs: load one by path, list those under a run root, and the ``%trainmeter runs`` table."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import chain, count
from pathlib import Path
from typing import Any

from trainmeter.core.provenance import finite_number
from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.record import export
from trainmeter.record.events import LOG_FILE, PASSPORT_FILE, ReadStats, Record, iter_events, last_of_kinds, read_events
from trainmeter.record.runs_table import RUNS_SHOWN, last_report, parent_name, run_folders, runs_table, training_order
from trainmeter.record.safe_read import NO_PASSPORT, PASSPORT_TYPES, read_passport, wrong_type
from trainmeter.sizes import format_bytes

__all__ = ["RUNS_SHOWN", "Run", "damaged_passport", "load", "make_run_dir", "runs", "runs_table", "summarise_log",
           "trainings"]  # RUNS_SHOWN and runs_table: the runs table's, re-exported (docs/spec.md section 8)

MAX_CHECKPOINTS = 1000  # checkpoint records a log summary keeps (the last ones: a resume reads the last)
SUMMARY_MAX_BYTES = 16 * 1024 * 1024  # of a run log a summary (a run without a passport) reads in full; then its tail
REPLAY_MAX_BYTES = 512 * 1024 * 1024  # of a run log Run.events reads (the rest is left out, and said)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A saved run folder and its passport; without a readable one (killed, damaged), a summary of its run log
    (``summarised_from`` ``"events.jsonl"``)."""

    dir: Path
    passport: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The run's name."""
        return str(self.passport.get("name") or self.dir.name)

    @property
    def status(self) -> str:
        """``completed`` ... ``terminated``; without a passport ``killed`` (no end record and its log silent: docs/spec.md
        section 22) or ``unfinished`` (it may still run); ``damaged`` (see :attr:`damaged`)."""
        if self.passport.get("killed") and self.passport.get("status") == "unfinished":
            return "killed"
        return str(self.passport.get("status") or "unfinished")

    @property
    def parent(self) -> Path | None:
        """The folder of the run this one resumed (``--resume``: docs/spec.md section 22), ``None`` for a first run."""
        return self.dir.parent / name if (name := parent_name(self.passport)) is not None else None

    @property
    def has_passport(self) -> bool:
        """Whether the figures come from a passport (else from the run log)."""
        return bool(self.passport) and "summarised_from" not in self.passport

    @property
    def damaged(self) -> str | None:
        """Why a file of this run folder could not be read (``None`` when none is damaged)."""
        return str(self.passport["damaged"]) if self.passport.get("damaged") else None

    def events(self, stats: ReadStats | None = None) -> list[Record]:
        """The run log's records, at most :data:`REPLAY_MAX_BYTES` (``stats.bytes_left_out``: the rest); none for a
        launch folder (its ranks keep their own logs) or a damaged log."""
        try:
            return read_events(self.dir / LOG_FILE, stats=stats, max_bytes=REPLAY_MAX_BYTES)
        except OSError:  # missing, or not a regular file (Damaged)
            return []

    # data out (record/export.py): to_pandas(), export_tensorboard(logdir), export_wandb(project, mode="offline")
    to_pandas, export_tensorboard, export_wandb = export.to_pandas, export.export_tensorboard, export.export_wandb

    def __repr__(self) -> str:
        return f"Run({self.name!r}, status={self.status!r}, dir={str(self.dir)!r})"


def load(path: str | Path) -> Run:
    """Load a saved run from its folder, its ``passport.json`` or its ``events.jsonl``.

    Without a readable passport, it is summarised from its run log; a damaged file makes the run ``damaged``
    (``passport["damaged"]`` says why). ``FileNotFoundError`` when ``path`` holds no run.
    """
    p = Path(path).expanduser()
    if not p.is_dir() and os.path.lexists(p):
        p = p.parent
    if not os.path.lexists(p / LOG_FILE) and not os.path.lexists(p / PASSPORT_FILE):
        raise FileNotFoundError(f"no trainmeter run at {str(path)!r}: expected a folder with events.jsonl or passport.json")
    try:
        if passport := read_passport(p):
            return Run(dir=p, passport=passport)
        problem = "passport.json holds no passport"
    except OSError as exc:  # missing, or Damaged
        problem = None if isinstance(exc, FileNotFoundError) else str(exc)
    try:
        return Run(dir=p, passport=summarise_log(p / LOG_FILE, problem))
    except Exception as exc:  # a log of odd records: the run is damaged, never the caller's error
        return Run(dir=p, passport=damaged_passport(p, f"{problem or 'events.jsonl'}; its run log could not be "
                                                       f"summarised ({type(exc).__name__}: {exc})"))


def damaged_passport(folder: Path, reason: str) -> dict[str, Any]:
    """The passport-shaped stand-in of a run folder nothing can be read from (status ``damaged``)."""
    return {"name": folder.name, "status": "damaged", "damaged": reason, "steps": 0, "tokens": 0,
            "warnings": [f"damaged: {reason}"], "summarised_from": "nothing"}


def summarise_log(path: Path, problem: str | None = None, max_bytes: int = SUMMARY_MAX_BYTES) -> dict[str, Any]:
    """A passport-shaped summary of a run from its run log alone (series from its first ``max_bytes``, the last report
    and end from its tail); ``problem`` (the passport's damage) makes the status ``damaged``."""
    read = ReadStats()
    found: dict[str, dict[str, Any]] = {}  # the first start, the last interval, heartbeat and end
    stats: dict[str, dict[str, Any]] = {}
    checkpoints: list[dict[str, Any]] = []
    last_step = origin = log_damage = None
    try:
        for e in iter_events(path, stats=read, max_bytes=max_bytes):
            kind = e.get("kind")
            if kind in ("interval", "heartbeat", "end") or (kind == "start" and "start" not in found):
                found[str(kind)] = dict(e)
            elif kind == "steps" and isinstance(e.get("step"), list) and e["step"]:
                if origin is None:  # a resumed run logs steps of the training from origin + 1 (section 22)
                    origin = e["step"][0] - 1 if finite_number(e["step"][0]) is not None else 0
                last_step = max([last_step or 0, *(n - origin for n in e["step"] if finite_number(n) is not None)])
            elif kind == "series":
                _add_series(stats, e)
            elif kind == "checkpoint":
                _add_checkpoint(checkpoints, e)
    except OSError as exc:  # missing, or Damaged
        log_damage = None if isinstance(exc, FileNotFoundError) else str(exc)
    if read.bytes_left_out:
        tail_found = last_of_kinds(path, ("interval", "heartbeat", "end", "checkpoint"))
        _add_checkpoint(checkpoints, tail_found.pop("checkpoint", {}))  # the last, past the bound
        found.update({kind: dict(record) for kind, record in tail_found.items()})
    start, last, beat, end = (found.get(kind, {}) for kind in ("start", "interval", "heartbeat", "end"))
    figures = last_report(start, last, beat, end)
    if figures["steps"] is not None:  # a heartbeat's: counted after the last report
        last_step = max(last_step or 0, figures["steps"])
    problem = problem or (NO_PASSPORT if end else None)  # ended, then killed before its passport was written
    damage = "; ".join(d for d in (problem, log_damage) if d) or None
    why = f"damaged: {problem}" if problem else ("no passport: the run was killed (no end record; its log fell "
                                                 f"silent at {figures['last_seen_at']})" if figures["killed"] else
                                                 "no passport: the run did not finish (kernel killed?)")
    notes = [f"{why}; figures are from its run log's last report"]
    if read.lines_skipped:
        notes.append(f"its run log is damaged: {read.lines_skipped} unreadable lines skipped")
    if read.bytes_left_out:
        notes.append(f"its run log is {format_bytes(max_bytes + read.bytes_left_out)}: series figures are from its "
                     f"first {format_bytes(max_bytes)}, counters from its last report")
    if log_damage:
        notes.append(f"damaged: {log_damage}")
    out = {"name": start.get("name"), "status": "damaged" if damage else (end.get("status") or "unfinished"),
           "error": end.get("error"), "started_at": start.get("started_at"), "ended_at": end.get("ended_at"),
           "elapsed_s": figures["elapsed_s"], "steps": last_step if last_step is not None else 0,
           # token_unit null in a report: no batch read, the count unknown (docs/spec.md section 6)
           "tokens": last.get("tokens") or 0 if last.get("token_unit", "tokens") else None,
           "token_unit": last.get("token_unit", "tokens"),
           "phases_s": last.get("phases_s") or {}, "throughput": last.get("throughput") or {},
           "memory": last.get("memory") or {}, "series": stats, "options": start.get("options") or {},
           "checkpoints": checkpoints,
           "warnings": notes, "summarised_from": "events.jsonl", "last_seen_at": figures["last_seen_at"],
           "killed": figures["killed"]}
    if (bad := wrong_type(out, PASSPORT_TYPES)) is not None:  # a log record of the wrong types: keep the counters out
        damage = "; ".join(d for d in (damage, f"events.jsonl: {bad}") if d)
        out.update(status="damaged", elapsed_s=None, steps=0, tokens=0, token_unit="tokens", phases_s={},
                   throughput={}, memory={}, options={}, name=out["name"] if isinstance(out["name"], str) else None,
                   started_at=None, ended_at=None, error=None)
    if damage:
        out["damaged"] = damage
    return out


def _add_checkpoint(found: list[dict[str, Any]], e: Any) -> None:
    """Fold one ``checkpoint`` record into ``found`` (the passport's entries, the last :data:`MAX_CHECKPOINTS`): a
    rename's replaces the record of the file it renamed; one already there (the tail's) is not added twice."""
    if not isinstance(e.get("step"), int) or e.get("kind") != "checkpoint":
        return
    entry = {k: e.get(k) for k in ("path", "step", "bytes", "source")}
    moved = e.get("renamed_from")
    found[:] = [c for c in found if c != entry and (moved is None or c["path"] != moved or c["step"] != e["step"])]
    found.append(entry)
    del found[:-MAX_CHECKPOINTS]


def _add_series(stats: dict[str, dict[str, Any]], e: Record) -> None:
    """Fold one ``series`` record into the per-series last/min/max (step series only)."""
    if e.get("x", "step") != "step" or not isinstance(e.get("value"), list):
        return
    values = [v for v in e["value"] if finite_number(v) is not None]
    if not values:
        return
    st = stats.setdefault(str(e.get("name")), {"last": None, "min": None, "max": None, "count": 0, "last_step": None})
    kept = [v for v in (st["min"], st["max"]) if v is not None]
    st.update(last=values[-1], min=min(values + kept), max=max(values + kept), count=st["count"] + len(e["value"]))
    steps = e.get("step")
    st["last_step"] = steps[-1] if isinstance(steps, list) and steps else None


def runs(root: str | Path | None = None) -> list[Run]:
    """Return saved runs under ``root`` (default ``.trainmeter/runs``), oldest first.

    A damaged run folder is listed (summarised from what is readable, status ``damaged``), never an error.
    """
    base = Path(root).expanduser() if root is not None else DEFAULT_RUN_ROOT
    found = []
    for child in run_folders(base):
        try:
            found.append(load(child))
        except Exception as exc:  # never because of one folder
            found.append(Run(dir=child, passport=damaged_passport(child, f"{type(exc).__name__}: {exc}")))
    return found


def trainings(root: str | Path | None = None) -> list[list[Run]]:
    """The saved runs under ``root`` by training (docs/spec.md section 22), in the order of their first runs: each a
    first run, then every run that resumed one of its runs (under its parent, oldest first). Never an error."""
    found = {r.dir.name: r for r in runs(root)}
    blocks: list[list[Run]] = []
    for name, depth in training_order({n: parent_name(r.passport) for n, r in found.items()}):
        if not depth:
            blocks.append([])
        blocks[-1].append(found[name])
    return sorted(blocks, key=lambda b: b[0].dir.name)


def make_run_dir(root: Path, name: str, now: datetime) -> Path:
    """Create and return ``<root>/<UTC timestamp>-<name>`` (suffixed if taken)."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root.mkdir(parents=True, exist_ok=True)
    for candidate in chain([root / f"{stamp}-{name}"], (root / f"{stamp}-{name}-{n}" for n in count(2))):
        with contextlib.suppress(FileExistsError):
            candidate.mkdir()
            return candidate
    raise AssertionError("unreachable")  # count() is endless
