"""The parent of a resumed run: ``--resume last|NAME|PATH`` resolved to a saved run folder, and what its record says
(docs/spec.md section 22). Pure reads of the parent's ``passport.json`` and ``events.jsonl``; any thread."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.record.events import LOG_FILE, iter_events
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
    elif _is_run_folder(folder):
        found = [folder]
    else:  # a run name: <stamp>-<name> or <stamp>-<name>-<n> (record/runs.py make_run_dir)
        same = re.compile(r"[0-9]{8}T[0-9]{6}Z-" + re.escape(text) + r"(-[0-9]+)?\Z")
        found = [f for f in folders if same.match(f.name)][-1:]
    if not found:
        raise ValueError(f"invalid value {spec!r} for --resume: no saved run by that name or path under "
                         f"{str(root)!r}; {VALID}")
    return Path(os.path.abspath(found[0]))


def _is_run_folder(folder: Path) -> bool:
    try:
        return folder.is_dir() and folder in run_folders(folder.parent)
    except OSError:  # a name too long for the file system, say: no run
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentRecord:
    """What the parent's record says: its passport, and its own tokens (or samples) after each checkpoint's step
    and its last (``tokens_after``; empty when they were not read: no batch, or a log missing steps)."""

    folder: Path
    passport: dict[str, Any]
    tokens_after: dict[int, int]

    @property
    def steps(self) -> int:
        """The parent's own optimizer steps."""
        steps = self.passport.get("steps")
        return steps if isinstance(steps, int) else 0

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """Its checkpoint records (``tm.checkpoint()`` and every saver's), in step order."""
        return checkpoints_of(self.passport)

    @property
    def lineage(self) -> dict[str, Any]:
        """The parent's own ``lineage`` section (empty: it started the training)."""
        section = self.passport.get("lineage")
        return section if isinstance(section, dict) else {}

    def checkpoint_path(self, record: dict[str, Any]) -> str:
        """A checkpoint record's path, absolute: relative to the parent's folder when there, else as written."""
        path = Path(record["path"]).expanduser()
        inside = self.folder / path
        return os.path.abspath(inside if not path.is_absolute() and inside.exists() else path)


def checkpoints_of(passport: dict[str, Any]) -> list[dict[str, Any]]:
    """A passport's checkpoint records with a step and a path, in step order."""
    out = [c for c in passport.get("checkpoints") or [] if isinstance(c, dict) and
           isinstance(c.get("step"), int) and isinstance(c.get("path"), str)]
    return sorted(out, key=lambda c: c["step"])


def read_parent(folder: Path) -> ParentRecord:
    """The parent's record (a run without a passport is summarised from its log, as ``tm.load`` does); its tokens
    summed from the log's per-step counts (docs/spec.md section 6 ``steps``), bounded to the steps it needs."""
    passport = load(folder).passport
    steps = passport.get("steps") if isinstance(passport.get("steps"), int) else 0
    wanted = {c["step"] for c in checkpoints_of(passport)} | {steps}
    after: dict[int, int] = {}
    if passport.get("token_unit") is not None:
        seen = total = 0
        try:
            for e in iter_events(folder / LOG_FILE, kinds=("steps",)):
                for value in e.get("value") or []:
                    seen, total = seen + 1, total + int(value)
                    if seen in wanted:
                        after[seen] = total
        except (OSError, TypeError, ValueError):
            seen = -1
        if seen != steps:  # a gap in the log: the counts are not all there (unknown, never a guess)
            after = {}
    return ParentRecord(folder=folder, passport=passport, tokens_after=after)
