"""One run folder per launch, chosen without a race (a claim file linked atomically by the first rank); one seat
(``rank-<k>/``, made with ``mkdir``) per rank (docs/spec.md section 19). Once per rank.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from trainmeter.ranks.identity import RankIdentity
from trainmeter.record.runs import make_run_dir
from trainmeter.record.safe_read import read_bytes

RUN_DIR_ENV = "TRAINMETER_RUN_DIR"
PARENT_ENV = "TRAINMETER_RUN_PARENT"
PARENT_MARKER = ".trainmeter-parent"  # the pid of the monitored parent that made the run folder and exported it
CLAIMS = ".launches"
SEAT_PREFIXES = ("rank-", "proc-")  # what a seat folder's name starts with (seat_name, take_seat)
MAX_GENERATIONS = 10_000
CLAIM_WAIT_S = 5.0
CLAIM_MAX_BYTES = 4096  # a claim holds one folder name; a larger file is not one


def inherited_run_dir(environ: Mapping[str, str] | None = None, pid: int | None = None) -> Path | None:
    """The run folder a monitored parent handed to this process; ``None`` in the parent itself (its pid is
    ``TRAINMETER_RUN_PARENT``) and when the folder is not one that parent marked (:func:`mark_parent_folder`:
    a folder that does not exist, or any other folder, ``/`` included, is never written to)."""
    env = os.environ if environ is None else environ
    raw, parent = env.get(RUN_DIR_ENV), env.get(PARENT_ENV)
    if not raw or not parent or parent == str(os.getpid() if pid is None else pid):
        return None
    try:  # a regular file of a few bytes (record/safe_read.py)
        marked = read_bytes(Path(raw) / PARENT_MARKER, 32).decode("ascii", "replace").strip() == parent
    except OSError:
        return None
    return Path(raw) if marked else None


def mark_parent_folder(run_dir: Path, pid: int | None = None) -> bool:
    """Mark ``run_dir`` as the run folder of the monitored process ``pid`` (default: this one), which its children
    may seat themselves in; returns whether the mark was written."""
    try:
        (Path(run_dir) / PARENT_MARKER).write_text(str(os.getpid() if pid is None else pid), encoding="ascii")
    except OSError:
        return False
    return True


def claim_name(name: str, key: str, generation: int) -> str:
    """File name of a launch claim (hash of run name and launch key, plus generation)."""
    digest = hashlib.sha1(f"{name}|{key}".encode()).hexdigest()[:16]
    return f"{digest}-{generation}"


def seat_name(identity: RankIdentity, pid: int | None = None) -> str:
    """The seat folder's preferred name: ``rank-<k>`` or ``proc-<pid>`` without a rank."""
    if identity.rank is None:
        return f"proc-{os.getpid() if pid is None else pid}"
    return f"rank-{identity.rank}"


def _read_claim(path: Path, wait_s: float) -> str | None:
    deadline = time.monotonic() + wait_s
    while True:
        try:  # a regular file only (a FIFO would block), a few bytes (record/safe_read.py)
            text = read_bytes(path, CLAIM_MAX_BYTES).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        except OSError:  # Damaged: not a claim this rank can use
            text = ""
        if text in (".", "..") or "/" in text or "\\" in text or "\x00" in text:
            text = ""  # a claim names one folder of the run root, never a path out of it
        if text:
            return text
        if time.monotonic() > deadline:  # a claim is written before it is linked: never empty
            return None
        time.sleep(0.01)


def _publish_claim(path: Path, folder: str) -> bool:
    """Atomically create ``path`` holding ``folder``; ``False`` if another rank did first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:  # the temporary file goes whatever fails (a full disk included)
        tmp.write_text(folder + "\n", encoding="utf-8")
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def launch_dir(root: Path, name: str, identity: RankIdentity, now: datetime) -> Path:
    """The shared run folder of this rank's launch (made by whichever rank arrives first).

    Raises:
        ValueError: When ``identity`` has no launch key (not a launch).
    """
    if identity.launch_key is None:
        raise ValueError("not a launch: no rank environment (RANK/WORLD_SIZE, SLURM_PROCID) was found")
    root.mkdir(parents=True, exist_ok=True)
    seat = seat_name(identity)
    for generation in range(MAX_GENERATIONS):
        claim = root / CLAIMS / claim_name(name, identity.launch_key, generation)
        folder = _read_claim(claim, CLAIM_WAIT_S)
        if folder is None:
            made = make_run_dir(root, name, now)
            if _publish_claim(claim, made.name):
                return made
            made.rmdir()
            folder = _read_claim(claim, CLAIM_WAIT_S)
            if folder is None:
                continue
        target = root / folder
        if target.is_dir() and not (target / seat).exists():
            return target
    raise RuntimeError(f"no free seat for {seat} under {root} after {MAX_GENERATIONS} launches with one key")


def seats(launch_dir: Path) -> list[Path]:
    """The seat folders of a launch (``rank-<k>``, ``proc-<pid>``), by name."""
    try:
        return sorted(p for p in Path(launch_dir).iterdir() if p.name.startswith(SEAT_PREFIXES) and p.is_dir())
    except OSError:
        return []


def take_seat(run_dir: Path, identity: RankIdentity, pid: int | None = None) -> Path:
    """Make and return this rank's folder inside ``run_dir`` (``rank-<k>``, or a unique fallback)."""
    pid = os.getpid() if pid is None else pid
    seat = run_dir / seat_name(identity, pid)
    try:
        seat.mkdir(parents=True)
        return seat
    except FileExistsError:
        seat = run_dir / f"{seat.name}-{pid}"
        seat.mkdir(parents=True, exist_ok=True)
        return seat
