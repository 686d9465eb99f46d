"""Data out (docs/spec.md section 16): a saved run as pandas DataFrames, TensorBoard event files, an offline W&B run.

Read from the run folder; pandas, tensorboard and wandb are imported where needed. No thread of their own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.record.events import LOG_FILE, ReadStats, Record, iter_events, read_events
from trainmeter.record.safe_read import iso_time

INTERVAL_TAGS = ("throughput", "phases_s", "compute", "energy")  # interval fields exported per report (numbers only)


@dataclass(frozen=True, slots=True)
class RunFrames:
    """A run's tidy DataFrames (see the module docstring)."""

    series: Any
    steps: Any
    intervals: Any
    notes: tuple[str, ...] = ()
    """What the frames leave out, in words: records of the wrong types, a damaged or refused log."""


def _list_of(value: Any, n: int | None, *kinds: type) -> bool:
    """Whether ``value`` is a list (of ``n`` items) of ``kinds`` (``type(None)`` among them: or nulls), no bool."""
    return isinstance(value, list) and (n is None or len(value) == n) and all(
        isinstance(v, kinds) and not isinstance(v, bool) for v in value)


def _columns(events: Iterable[Record]) -> tuple[dict[str, list[Any]], dict[str, list[Any]], list[dict[str, Any]], int]:
    """The frames' columns, and how many records were left out for holding the wrong types."""
    series: dict[str, list[Any]] = {"name": [], "x_kind": [], "step": [], "t_s": [], "value": []}
    steps: dict[str, list[Any]] = {"step": [], "t_s": [], "tokens": []}
    intervals: list[dict[str, Any]] = []
    odd = 0
    for rec in events:
        kind = rec.get("kind")
        if kind in ("series", "steps"):
            step = rec.get("step", [])
            n = len(step) if isinstance(step, list) else -1
            t_us = rec.get("t_us", [0] * n if kind == "series" and n >= 0 else None)
            values = rec.get("value", [])
            typed = isinstance(rec.get("name"), str) and isinstance(rec.get("x", ""), str) if kind == "series" \
                else _list_of(values, None, int)  # a steps record's values: token counts
            if not (typed and _list_of(step, None, int) and _list_of(t_us, n, int)
                    and _list_of(values, n, int, float, type(None))):
                odd += 1
                continue
            cols = series if kind == "series" else steps
            cols["step"] += step
            cols["t_s"] += [t / 1e6 for t in t_us]
            if kind == "series":
                series["name"] += [rec["name"]] * n
                series["x_kind"] += [rec.get("x", "step")] * n
                series["value"] += [math.nan if v is None else v for v in values]
            else:
                steps["tokens"] += values
        elif kind == "interval":
            intervals.append({k: v for k, v in rec.items() if k not in ("schema_version", "kind")})
    return series, steps, intervals, odd


def to_pandas(run: Any) -> RunFrames:
    """A saved run's (``Run.to_pandas``) series, steps and intervals as tidy DataFrames (``.series``, ``.steps``,
    ``.intervals``); ``ImportError`` without pandas."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("Run.to_pandas needs pandas: pip install 'trainmeter[figures]' (or pandas)") from exc
    read, notes = ReadStats(), []
    try:
        series, steps, intervals, odd = _columns(iter_events(run.dir / LOG_FILE, stats=read))
    except OSError as exc:  # missing, or Damaged (not a regular file)
        series, steps, intervals, odd = _columns(())
        notes += [] if isinstance(exc, FileNotFoundError) else [f"damaged: {exc}"]
    if odd:
        notes.append(f"{odd} records of the wrong types left out")
    if read.lines_skipped:
        notes.append(f"{read.lines_skipped} unreadable lines of the run log skipped")
    dtypes = {"name": "category", "x_kind": "category", "step": "int64", "t_s": "float64", "value": "float64",
              "tokens": "int64"}
    s, st = (pd.DataFrame({k: pd.array(v, dtype=dtypes[k]) for k, v in cols.items()}) for cols in (series, steps))
    try:
        iv = pd.json_normalize(intervals, sep=".") if intervals else None
    except (ValueError, TypeError, RecursionError) as exc:
        iv = None
        notes.append(f"the report rows could not be flattened ({type(exc).__name__}); intervals left out")
    if iv is None:
        iv = pd.DataFrame({"step": pd.array([], dtype="int64")})
    return RunFrames(series=s, steps=st, intervals=iv, notes=tuple(notes))


def _numbers(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _numbers(f"{prefix}/{k}", v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        out[prefix] = float(value)


def report_scalars(rec: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of one interval record under :data:`INTERVAL_TAGS`, as ``tag: value``."""
    out: dict[str, float] = {}
    for key in INTERVAL_TAGS:
        if key in rec:
            _numbers(key, rec[key], out)
    return out


def export_tensorboard(run: Any, logdir: str | Path) -> Path:
    """Write a saved run (``Run.export_tensorboard``) as a TensorBoard event file under ``logdir``; returns its path.
    ``ImportError`` without tensorboard."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as exc:
        raise ImportError("Run.export_tensorboard needs tensorboard: pip install tensorboard") from exc
    events = read_events(run.dir / LOG_FILE)
    started = iso_time(run.passport.get("started_at") or next((e.get("started_at") for e in events
                                                               if e.get("kind") == "start"), None))
    t0 = started.timestamp() if started else time.time()
    Path(logdir).mkdir(parents=True, exist_ok=True)
    path = Path(logdir) / f"events.out.tfevents.{int(t0):010d}.trainmeter.{run.name}"
    writer = RecordWriter(path.open("wb"))

    def put(tag: str, step: int, t_s: float, value: float) -> None:
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        writer.write(Event(wall_time=t0 + t_s, step=int(step), summary=summary).SerializeToString())

    try:
        writer.write(Event(wall_time=t0, file_version="brain.Event:2").SerializeToString())
        for rec in events:
            kind = rec.get("kind")
            if kind in ("series", "steps"):
                tag = rec.get("name", "tokens_per_step")
                for step, t_us, value in zip(rec.get("step", []), rec.get("t_us", []), rec.get("value", []),
                                             strict=False):
                    if value is not None:
                        put(tag, step, t_us / 1e6, float(value))
            elif kind == "interval":
                for tag, value in report_scalars(rec).items():
                    put(tag, rec.get("step", 0), float(rec.get("elapsed_s", 0.0)), value)
    finally:
        writer.close()
    return path


def export_wandb(run: Any, project: str, mode: str = "offline", *, wandb_dir: str | Path | None = None) -> Any:
    """Log a saved run (``Run.export_wandb``) to a W&B run (``mode="offline"`` by default: nothing is sent); returns
    the finished W&B run. ``ImportError`` without wandb; ``ValueError`` for a ``mode`` other than offline, online,
    disabled."""
    if mode not in ("offline", "online", "disabled"):
        raise ValueError(f"invalid mode {mode!r} for export_wandb: valid are offline, online, disabled")
    try:
        import wandb
    except ImportError as exc:
        raise ImportError("Run.export_wandb needs wandb: pip install wandb") from exc
    events, passport = read_events(run.dir / LOG_FILE), run.passport
    by_step: dict[int, dict[str, float]] = {}
    for rec in events:
        kind = rec.get("kind")
        if kind == "series" and rec.get("x", "step") == "step":
            for step, value in zip(rec.get("step", []), rec.get("value", []), strict=False):
                if value is not None:
                    by_step.setdefault(int(step), {})[rec["name"]] = float(value)
        elif kind == "interval":
            by_step.setdefault(int(rec.get("step", 0)), {}).update(report_scalars(rec))
    out = wandb.init(project=project, name=run.name, mode=mode, dir=str(wandb_dir or run.dir),
                     config={"trainmeter": passport.get("options") or {}}, reinit=True)
    try:
        for step in sorted(by_step):
            out.log(by_step[step], step=step)
        summary = {k: passport.get(k) for k in ("status", "steps", "tokens", "goodput", "elapsed_s")}
        summary.update({f"throughput/{k}": v for k, v in (passport.get("throughput") or {}).items()})
        energy = passport.get("energy") or {}
        summary.update({f"energy/{k}": energy.get(k) for k in ("joules", "kwh", "j_per_token") if k in energy})
        out.summary.update({k: v for k, v in summary.items() if v is not None})
    finally:
        out.finish()
    return out

