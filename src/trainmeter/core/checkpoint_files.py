"""Checkpoint files: a free name per step, what a failed save left removed, a disk error named as one, and the
finite check of a NaN's recovery point (docs/spec.md section 21). Training thread (a checkpoint's)."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from contextlib import suppress
from pathlib import Path
from typing import Any

LOW_DISK_BYTES = 1 << 20  # free bytes under which a failed save is named a full disk (its saver may not say)
MAX_FILES = 2000  # files summed for a checkpoint folder's bytes
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO)


def free_stem(folder: Path, stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``... when a checkpoint of that step is already in ``folder``."""
    taken = {name.split(".")[0] for name in os.listdir(folder)}
    return next(name for n in itertools.count(1) if (name := stem if n == 1 else f"{stem}-{n}") not in taken)


def remove_partial(folder: Path, stem: str) -> None:
    """Remove what a failed save left named ``stem`` (a file, its ``.tmp``, a saver's folder); never raises."""
    with suppress(OSError):
        for name in os.listdir(folder):
            if name == stem or name.startswith(stem + "."):
                path = folder / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def disk_error(exc: BaseException, folder: Path) -> str | None:
    """The sentence naming a disk error behind ``exc`` (its OSError chain, else under :data:`LOW_DISK_BYTES` free
    at ``folder`` when the save failed: a saver that writes by path reports only a short write), else ``None``."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:
            return f"disk error: {os.strerror(seen.errno).lower()} ({errno.errorcode[seen.errno]}) writing {folder}"
        seen = seen.__cause__ or seen.__context__
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free < LOW_DISK_BYTES:
        return f"disk error: no space left on device ({free} bytes free at {folder}; the saver said {exc!r})"
    return None


class Refused(Exception):
    """A checkpoint that is not safe to take here (no finite state for a non-finite loss's recovery point, no model,
    a disk error...); the message says why."""


def recovery_note(model: Any, step: int, when: str, last: Any) -> str:
    """The recovery point's sentence when every floating tensor of ``model`` is finite after ``step`` (``when``:
    ``before`` the step whose loss was not finite, or ``after`` it; ``last``: the run's last checkpoint record or
    ``None``); else :class:`Refused` (docs/spec.md section 21). Each floating tensor of the state dict is read
    through a CPU copy as a save copies it (no device allocation; the sync is the checkpoint's)."""
    floating = [t for t in model.state_dict().values() if getattr(t, "is_floating_point", None) is not None
                and t.is_floating_point()]
    bad, total = sum(not bool(t.detach().cpu().isfinite().all()) for t in floating), len(floating)
    if bad:
        earlier = f"; the last checkpoint is {last.path} (step {last.step})" if last is not None else ""
        raise Refused(f"no finite state to save: {bad} of {total} tensors of the weights after step {step} are "
                            "not finite and none was kept from before the step whose loss was not finite (a loss "
                            f"read on the device or inside an optimizer's closure is known only after its step){earlier}")
    if when == "before":
        return (f"the recovery point: the weights after step {step}, saved before step {step + 1} applied the "
                "gradients of its non-finite loss")
    return f"the recovery point: the weights after step {step}, finite after the step whose loss was not"


def write_own(path: Path, model: Any, optimizer: Any, step: int) -> Path:
    """trainmeter's own checkpoint of ``model`` (and ``optimizer``) at ``path``: written to ``<path>.tmp`` through
    a file object (the write's own OSError, ENOSPC..., reaches the caller, not torch's), then renamed."""
    import torch

    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict() if optimizer is not None else None,
               "step": step}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(payload, f)
    os.replace(tmp, path)
    return path


def size_bytes(where: Any) -> int | None:
    """Bytes on disk at ``where`` (a file, or a folder's files up to :data:`MAX_FILES`), else ``None``."""
    if not isinstance(where, (str, os.PathLike)):
        return None
    try:
        path = os.fspath(where)
        if os.path.isfile(path):
            return os.path.getsize(path)
        if not os.path.isdir(path):
            return None
        found = (os.path.join(root, name) for root, _dirs, names in os.walk(path) for name in names)
        paths = list(itertools.islice(found, MAX_FILES + 1))
        return None if len(paths) > MAX_FILES else sum(map(os.path.getsize, paths))
    except (OSError, TypeError, ValueError):
        return None
