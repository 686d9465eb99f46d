"""The parent of a resumed run: ``--resume last|NAME|PATH`` resolved to a saved run folder (a killed run's too), and
what its record says (docs/spec.md section 22). Pure reads of the parent's ``passport.json``, else its
``events.jsonl`` (its ``checkpoint`` records) and ``checkpoints/`` folder; any thread."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.record.events import LOG_FILE, iter_events, last_of_kinds
from trainmeter.record.runs import load, run_folders

VALID = "expected last, the name of a saved run under the run root, or a run folder (one holding events.jsonl)"


def resolve_parent(spec: Any, root: Path) -> Path:
    """The folder of the run ``spec`` names: ``last`` (the newest under ``root``), a run name (its newest run) or a
    run folder's path; absolute. ``ValueError`` naming the value and what is valid."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip() or "\x00" in str(spec):
        raise ValueError(f"invalid value {spec!r} for --resume: {VALID}")
    text = str(spec)
    folders, folder = run_folders(Path(root).expanduser()), Path(text).expanduser()
    if text == "last":
        found = folders[-1:]
    elif os.path.isdir(folder) and folder in run_folders(folder.parent):  # (isdir: False for a name too long)
        found = [folder]
    else:  # a run name: <stamp>-<name> or <stamp>-<name>-<n> (record/runs.py make_run_dir)
        same = re.compile(r"[0-9]{8}T[0-9]{6}Z-" + re.escape(text) + r"(-[0-9]+)?\Z")
        found = [f for f in folders if same.match(f.name)][-1:]
    if not found:
        raise ValueError(f"invalid value {spec!r} for --resume: no saved run by that name or path under "
                         f"{str(root)!r}; {VALID}")
    return Path(os.path.abspath(found[0]))


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentRecord:
    """What the parent's record says: its passport (a killed run's: its log's summary, ``read_from`` says which), its
    own ``steps``, ``status`` (``killed``: no end and its log fell silent), ``ended_at`` (ISO; a killed run's last
    report or heartbeat), ``checkpoints`` (with a step and a path, in step order), its ``lineage`` section (empty: it
    started the training), its own tokens (or samples) after each checkpoint's step and its last (``tokens_after``;
    empty when they were not read: no batch, or a log missing steps) and its session seconds at the end of each
    (``step_s``; step 0 at 0) and of its last step logged (``last_step_s``)."""

    folder: Path
    passport: dict[str, Any]
    read_from: str
    steps: int
    status: Any
    ended_at: Any
    checkpoints: list[dict[str, Any]]
    lineage: dict[str, Any]
    tokens_after: dict[int, int]
    step_s: dict[int, float]
    last_step_s: float = 0.0

    def checkpoint_path(self, record: dict[str, Any]) -> str:
        """A checkpoint record's path, absolute: relative to the parent's folder when there, else as written."""
        path = Path(record["path"]).expanduser()
        inside = self.folder / path
        return os.path.abspath(inside if not path.is_absolute() and inside.exists() else path)


def _logged_lineage(folder: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A resumed run with no passport: its last report's ``lineage`` (the lineage wing's ``on_report``), the
    training's wall time carried on to the run's last report or heartbeat; ``{}`` when it wrote none."""
    last = last_of_kinds(folder / LOG_FILE, ("interval",)).get("interval") or {}
    lineage = last.get("lineage")
    runs = lineage.get("runs") if isinstance(lineage, dict) else None
    if not isinstance(lineage.get("training") if runs else None, dict) or not all(isinstance(r, dict) for r in runs):
        return {}
    training = dict(lineage["training"])
    late_s = minus(summary.get("elapsed_s"), last.get("elapsed_s"))
    training["wall_s"] = None if late_s is None or training.get("wall_s") is None else training["wall_s"] + late_s
    return {"lineage": {**lineage, "training": training}}


def minus(a: Any, b: Any) -> Any:
    return a - b if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)) else None


def read_parent(folder: Path) -> ParentRecord:
    """The parent's record (a run without a passport is summarised from its log, as ``tm.load`` does, its checkpoints
    its log's and those in its folder); its tokens and step times from the log's per-step records (docs/spec.md section 6
    ``steps``), bounded to the steps it needs."""
    passport = load(folder).passport
    if "summarised_from" in passport:  # its log's checkpoint records, then any file of its checkpoints/ they lack
        logged = [c for c in passport.get("checkpoints") or [] if isinstance(c, dict)]
        paths, names = {c.get("path") for c in logged}, []
        with contextlib.suppress(OSError):  # tm.checkpoint()'s and the controls': step-<n> (docs/spec.md section 21)
            names = sorted(os.listdir(folder / "checkpoints"))
        found = (re.fullmatch(r"step-([0-9]{1,18})(-[0-9]+)?(\.[A-Za-z0-9]+)?", name) for name in names)
        ckpts = [*logged, *({"path": p, "step": int(m.group(1)), "source": "checkpoints folder"} for m in found
                            if m is not None and m.group(3) != ".tmp"  # a save cut short: left out
                            and (p := f"checkpoints/{m.group(0)}") not in paths)]
        passport = {**passport, "checkpoints": ckpts, **_logged_lineage(folder, passport)}
    steps = passport.get("steps") if isinstance(passport.get("steps"), int) else 0
    checkpoints = sorted([c for c in passport.get("checkpoints") or [] if isinstance(c, dict) and
                          isinstance(c.get("step"), int) and isinstance(c.get("path"), str)], key=lambda c: c["step"])
    wanted = {c["step"] for c in checkpoints} | {steps}
    after: dict[int, int] = {}
    step_s: dict[int, float] = {0: 0.0}
    seen = last = 0
    origin = None  # a resumed parent logs steps of the training from origin + 1 (docs/spec.md section 22)
    total: int | None = 0
    last_s = 0.0
    try:
        for e in iter_events(folder / LOG_FILE, kinds=("steps",)):
            for n, value, t_us in zip(e.get("step") or [], e.get("value") or [], e.get("t_us") or [], strict=False):
                origin = int(n) - 1 if origin is None else origin
                seen, last = seen + 1, int(n) - origin
                total = None if total is None or value is None else total + int(value)
                last_s = t_us / 1e6
                if last in wanted:
                    step_s[last] = last_s
                    if total is not None:
                        after[last] = total
    except (OSError, TypeError, ValueError):
        seen = -1
    if seen != last or passport.get("token_unit") is None:  # a gap in the log, or no batch read: unknown
        after = {}
    why = "killed: its log fell silent" if passport.get("killed") else "no passport"
    return ParentRecord(folder=folder, passport=passport, steps=steps, checkpoints=checkpoints, tokens_after=after,
                        step_s=step_s, last_step_s=last_s,
                        read_from="its passport" if "summarised_from" not in passport else
                        f"its run log and checkpoints folder ({why}; its end is its last report or heartbeat)",
                        status="killed" if passport.get("killed") else passport.get("status"),
                        ended_at=passport.get("ended_at") or passport.get("last_seen_at"),
                        lineage=passport["lineage"] if isinstance(passport.get("lineage"), dict) else {})
