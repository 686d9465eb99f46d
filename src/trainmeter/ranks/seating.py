"""Who this process is in a launch, and where its record goes (docs/spec.md section 19).

Its identity from the launchers' environment, Slurm's or ``torch.distributed``, and the GPU it trains on, by UUID
("Each rank's device and ladder"): pure reads that never create a CUDA context or import torch (any thread). One run
folder per launch, chosen without a race (a claim file linked atomically by the first rank), and one seat
(``rank-<k>/``, made with ``mkdir``) per rank, instead of ``<root>/<UTC>-<name>/``: kept here for the ranks extension
and the merge (one run per process; training thread, once per run).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trainmeter.record.runs import make_run_dir
from trainmeter.record.safe_read import read_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class RankIdentity:
    """This process's place in a launch (docs/spec.md section 19; ``rank`` ``None`` when not part of one)."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int = 1
    local_world_size: int | None = None
    node_rank: int | None = None
    node: str
    launch_key: str | None = None
    backend: str | None = None
    source: str = "none"

    @property
    def distributed(self) -> bool:
        """Whether this process is one rank of a launch with more than one."""
        return self.rank is not None and self.world_size > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the rank passport's ``rank`` section), with provenance."""
        return {**asdict(self), "provenance": "detected" if self.source != "none" else "assumed"}


def this_node() -> str:
    """This machine's label: ``node-`` and the first 8 hex digits of the SHA-1 of its host name."""
    return "node-" + hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def _int(environ: Mapping[str, str], key: str) -> int | None:
    try:
        return int(environ.get(key, ""))  # unset or blank: not a number
    except ValueError:
        return None


_LAUNCHER_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
_SLURM_KEYS = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID")


def dist_state(dist: Any) -> tuple[int, int, str | None] | None:
    """``(rank, world_size, backend)`` from an initialised ``torch.distributed``, else ``None``."""
    dist = sys.modules.get("torch.distributed") if dist is None else dist
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        backend = dist.get_backend()
        return int(dist.get_rank()), int(dist.get_world_size()), str(backend) if backend else None
    except Exception:
        return None


def detect_identity(environ: Mapping[str, str] | None = None, dist: Any = None) -> RankIdentity:
    """Read this process's identity from ``environ`` (default ``os.environ``) and ``dist`` (a ``torch.distributed``
    -like module; default the imported one), which wins when initialised. Never raises; never imports torch."""
    env = os.environ if environ is None else environ
    node = this_node()
    state = dist_state(dist)
    rank, world, local_rank, local_world, node_rank = (_int(env, key) for key in _LAUNCHER_KEYS)
    source = "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env"
    if rank is None and _int(env, "SLURM_PROCID") is not None:
        rank, world, local_rank, local_world, node_rank = (_int(env, key) for key in _SLURM_KEYS)
        source = "slurm"
    backend = None
    if state is not None:
        rank, world, backend = state
        source = "torch.distributed"
    if rank is None or world is None or world < 1:
        return RankIdentity(node=node, backend=backend)  # not a rank
    if local_rank is None and local_world is not None and local_world > 0:
        local_rank = rank % local_world
    return RankIdentity(rank=rank, local_rank=local_rank, world_size=world, local_world_size=local_world,
                        node_rank=node_rank, node=node, launch_key=launch_key(env, world), backend=backend,
                        source=source)


def launch_key(environ: Mapping[str, str], world_size: int) -> str | None:
    """Text shared by every rank of one launch (run id, rendezvous address, Slurm job and step), or ``None``; two
    launches can share a key (torchrun's default ``"none"`` on one port): the seats tell them apart."""
    parts = [f"{key}={environ[key]}" for key in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID",
                                                 "SLURM_STEP_ID") if environ.get(key)]
    return ";".join([f"world={world_size}", *parts]) if parts else None


def rank_device(environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """This rank's device ``{"uuid", "cuda_ordinal", "nvml_index", "how", "provenance"}`` (``uuid`` ``None`` with an
    assumed ``nvml_index``), or ``None`` (no GPU, or nothing says which); ``environ``, ``modules``: for tests."""
    env = os.environ if environ is None else environ
    torch = (sys.modules if modules is None else modules).get("torch")

    def device(ordinal: int, uuid: str | None, nvml_index: int | None, how: str) -> dict[str, Any]:
        return {"uuid": uuid, "cuda_ordinal": ordinal, "nvml_index": nvml_index, "how": how,
                "provenance": "detected" if uuid else "assumed"}

    if torch is not None:
        try:
            cuda = torch.cuda
            if not cuda.is_initialized():
                return None
            held = [i for i in range(int(cuda.device_count())) if cuda.memory_reserved(i) > 0]
            if len(held) == 1:
                ordinal, how = held[0], "the one CUDA device where this rank's allocator holds memory"
            else:
                ordinal, how = int(cuda.current_device()), "torch.cuda.current_device() of this rank"
            uuid = str(cuda.get_device_properties(ordinal).uuid)
            return device(ordinal, uuid if uuid[:4].upper() in ("GPU-", "MIG-") else "GPU-" + uuid, None, how)
        except Exception:  # noqa: BLE001 - detection never raises into training
            return None
    ordinal = _int(env, "LOCAL_RANK")
    if ordinal is None:
        return None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return device(ordinal, None, ordinal, "LOCAL_RANK as the CUDA ordinal; CUDA order assumed equal to NVML order")
    entries = [e.strip() for e in cvd.split(",") if e.strip()]
    entry = entries[ordinal] if ordinal < len(entries) else ""
    if entry.upper().startswith("GPU-"):
        return device(ordinal, "GPU-" + entry[4:].lower(), None, "CUDA_VISIBLE_DEVICES entry LOCAL_RANK (a UUID)")
    if entry.isdigit():
        return device(ordinal, None, int(entry),
                      "CUDA_VISIBLE_DEVICES entry LOCAL_RANK; CUDA order assumed equal to NVML order")
    return None


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
    return f"{hashlib.sha1(f'{name}|{key}'.encode()).hexdigest()[:16]}-{generation}"


def seat_name(identity: RankIdentity, pid: int | None = None) -> str:
    """The seat folder's preferred name: ``rank-<k>`` or ``proc-<pid>`` without a rank."""
    return f"rank-{identity.rank}" if identity.rank is not None else f"proc-{os.getpid() if pid is None else pid}"


def _read_claim(path: Path, wait_s: float) -> str | None:
    deadline = time.monotonic() + wait_s
    while True:
        try:  # a regular file only (a FIFO would block), a few bytes (record/safe_read.py)
            text = read_bytes(path, CLAIM_MAX_BYTES).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        except OSError:  # Damaged: not a claim this rank can use
            text = ""
        if text not in ("", ".", "..") and not any(c in text for c in "/\\\x00"):
            return text  # a claim names one folder of the run root, never a path out of it
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
    """The shared run folder of this rank's launch (made by whichever rank arrives first). Raises ValueError when
    ``identity`` has no launch key (not a launch)."""
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
    except FileExistsError:
        seat = run_dir / f"{seat.name}-{pid}"
        seat.mkdir(parents=True, exist_ok=True)
    return seat


@dataclass(frozen=True, slots=True, kw_only=True)
class Seat:
    """This process's place in a launch's run folder: its own ``dir`` (``rank-<k>``) in the shared ``launch_dir``, the
    ``parent_pid`` owning that (``None``: the ranks own it) and its ``device`` when known at seating."""

    identity: RankIdentity
    launch_dir: Path
    dir: Path
    parent_pid: int | None
    device: dict[str, Any] | None = None


_SEAT: tuple[Seat, int] | None = None  # this process's seat and its pid (a forked child's inherited one is not)


def current_seat() -> Seat | None:
    """The seat of this process's run, or ``None`` when it is not a rank."""
    return _SEAT[0] if _SEAT is not None and _SEAT[1] == os.getpid() else None


def seat_for(root: Path, name: str, now: datetime) -> Seat | None:
    """Seat this process when it is a rank (a parent's child, or one rank of a launch); else ``None``."""
    global _SEAT
    _SEAT = None  # a new run: a seat of an earlier run in this process is not this one's
    identity = detect_identity()
    base, parent_pid = inherited_run_dir(), _int(os.environ, PARENT_ENV)  # not a pid: the ranks own the folder
    if base is None:
        if not identity.distributed:
            return None
        base, parent_pid = launch_dir(root, name, identity, now), None
    seat = Seat(identity=identity, launch_dir=base, dir=take_seat(base, identity), parent_pid=parent_pid,
                device=rank_device())
    _SEAT = (seat, os.getpid())
    return seat


def clear_seat() -> None:
    """Forget this process's seat (its run ended)."""
    global _SEAT
    _SEAT = None
