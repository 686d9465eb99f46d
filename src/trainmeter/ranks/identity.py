"""Who this process is in a launch, from the launchers' environment, Slurm's or ``torch.distributed``, and which GPU
it trains on, by UUID (docs/spec.md section 19, "Each rank's device and ladder"). Pure reads: never creates a CUDA
context or imports torch; any thread.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class RankIdentity:
    """This process's place in a launch (docs/spec.md section 19; ``rank`` ``None`` when not part of one)."""

    rank: int | None
    local_rank: int | None
    world_size: int
    local_world_size: int | None
    node_rank: int | None
    node: str
    launch_key: str | None
    backend: str | None
    source: str

    @property
    def distributed(self) -> bool:
        """Whether this process is one rank of a launch with more than one."""
        return self.rank is not None and self.world_size > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the rank passport's ``rank`` section), with provenance."""
        out = asdict(self)
        out["provenance"] = "detected" if self.source != "none" else "assumed"
        return out


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
        return RankIdentity(rank=None, local_rank=None, world_size=1, local_world_size=None, node_rank=None,
                            node=node, launch_key=None, backend=backend, source="none")
    if local_rank is None and local_world is not None and local_world > 0:
        local_rank = rank % local_world
    return RankIdentity(rank=rank, local_rank=local_rank, world_size=world, local_world_size=local_world,
                        node_rank=node_rank, node=node, launch_key=launch_key(env, world), backend=backend,
                        source=source)


def launch_key(environ: Mapping[str, str], world_size: int) -> str | None:
    """Text shared by every rank of one launch (run id, rendezvous address, Slurm job and step), or ``None``.

    Two launches can share a key (torchrun's default ``"none"`` on one port): the seats tell them apart.
    """
    parts = [f"{key}={environ[key]}" for key in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID",
                                                 "SLURM_STEP_ID") if environ.get(key)]
    return ";".join([f"world={world_size}", *parts]) if parts else None


def rank_device(environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """This rank's device ``{"uuid", "cuda_ordinal", "nvml_index", "how", "provenance"}`` (``uuid`` ``None`` with an
    assumed ``nvml_index``), or ``None`` (no GPU, or nothing says which); ``environ``, ``modules``: for tests."""
    env = os.environ if environ is None else environ
    mods = sys.modules if modules is None else modules
    torch = mods.get("torch")
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
            uuid = uuid if uuid[:4].upper() in ("GPU-", "MIG-") else "GPU-" + uuid
            return {"uuid": uuid, "cuda_ordinal": ordinal, "nvml_index": None, "how": how, "provenance": "detected"}
        except Exception:  # noqa: BLE001 - detection never raises into training
            return None
    ordinal = _int(env, "LOCAL_RANK")
    if ordinal is None:
        return None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return {"uuid": None, "cuda_ordinal": ordinal, "nvml_index": ordinal, "provenance": "assumed",
                "how": "LOCAL_RANK as the CUDA ordinal; CUDA order assumed equal to NVML order"}
    entries = [e.strip() for e in cvd.split(",") if e.strip()]
    if ordinal >= len(entries):
        return None
    entry = entries[ordinal]
    if entry.upper().startswith("GPU-"):
        return {"uuid": "GPU-" + entry[4:].lower(), "cuda_ordinal": ordinal, "nvml_index": None,
                "provenance": "detected", "how": "CUDA_VISIBLE_DEVICES entry LOCAL_RANK (a UUID)"}
    if entry.isdigit():
        return {"uuid": None, "cuda_ordinal": ordinal, "nvml_index": int(entry), "provenance": "assumed",
                "how": "CUDA_VISIBLE_DEVICES entry LOCAL_RANK; CUDA order assumed equal to NVML order"}
    return None
