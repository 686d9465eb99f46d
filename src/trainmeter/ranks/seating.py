"""Where a rank's record goes: its seat in the launch's run folder, instead of ``<root>/<UTC>-<name>/``; kept here
for the ranks extension and the merge (one run per process). Training thread, once per run.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trainmeter.ranks.identity import RankIdentity, detect_identity, rank_device
from trainmeter.ranks.launch import PARENT_ENV, inherited_run_dir, launch_dir, take_seat


@dataclass(frozen=True, slots=True, kw_only=True)
class Seat:
    """This process's place in a launch's run folder: its own ``dir`` (``rank-<k>``) in the shared ``launch_dir``, the
    ``parent_pid`` owning that (``None``: the ranks own it) and its ``device`` when known at seating."""

    identity: RankIdentity
    launch_dir: Path
    dir: Path
    parent_pid: int | None
    device: dict[str, Any] | None = None


_SEAT: Seat | None = None


def current_seat() -> Seat | None:
    """The seat of this process's run, or ``None`` when it is not a rank."""
    return _SEAT if _SEAT is not None and _SEAT_PID == os.getpid() else None


_SEAT_PID = 0


def seat_for(root: Path, name: str, now: datetime) -> Seat | None:
    """Seat this process when it is a rank (a parent's child, or one rank of a launch); else ``None``."""
    global _SEAT, _SEAT_PID
    _SEAT = None  # a new run: a seat of an earlier run in this process is not this one's
    identity = detect_identity()
    inherited = inherited_run_dir()
    parent_pid: int | None = None
    if inherited is not None:
        base = inherited
        with contextlib.suppress(ValueError):  # not a pid: the ranks own the launch folder
            parent_pid = int(os.environ.get(PARENT_ENV, ""))
    elif identity.distributed:
        base = launch_dir(root, name, identity, now)
    else:
        return None
    seat = Seat(identity=identity, launch_dir=base, dir=take_seat(base, identity), parent_pid=parent_pid,
                device=rank_device())
    _SEAT, _SEAT_PID = seat, os.getpid()
    return seat


def clear_seat() -> None:
    """Forget this process's seat (its run ended)."""
    global _SEAT
    _SEAT = None
