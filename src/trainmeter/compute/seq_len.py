"""The sequence length S the attention terms use: packed sequences, the run's token-weighted mean, the batch.

S is token-weighted, ``sum(l * l) / sum(l)`` (docs/spec.md section 5, "S"); a device's packed lengths come through a
non-blocking copy polled at later reports, no sync. Training thread (reports). Never raises.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from typing import Any

PACKING_KEYS = ("cu_seqlens", "cu_seq_lens_q", "cu_seqlens_q", "position_ids")


def weighted_length(lengths: list[int]) -> float | None:
    """Token-weighted mean length: ``sum(l * l) / sum(l)`` over positive lengths, or ``None`` for none."""
    kept = [n for n in lengths if n > 0]
    total = sum(kept)
    return sum(n * n for n in kept) / total if total else None


def lengths_from(key: str, values: list[list[int]] | list[int]) -> list[int]:
    """Sequence lengths from ``cu_seqlens``-style boundaries or ``position_ids`` rows (plain ints)."""
    if key != "position_ids":
        return [b - a for a, b in itertools.pairwise(int(v) for v in values)]  # type: ignore[arg-type]
    rows = values if values and isinstance(values[0], list) else [values]
    out: list[int] = []
    for row in rows:  # a sequence starts at each position 0 (and at the row's start)
        starts = [0, *(i for i, position in enumerate(row) if position == 0 and i), len(row)]  # type: ignore[arg-type]
        out += [b - a for a, b in itertools.pairwise(starts) if b > a]
    return out


class PackedRead:
    """The example batch's packing tensor (keyword ``key``; ``rows`` of token ids), read once (a device's through a
    non-blocking copy and an event)."""

    def __init__(self, key: str, tensor: Any, torch: Any) -> None:
        self.key = key
        self._event: Any = None
        self.rows = int(tensor.shape[0]) if tensor.dim() > 1 else 1
        if tensor.device.type == "cuda":
            pinned = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, pin_memory=True)  # host memory
            self._values = pinned.copy_(tensor.detach(), non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()  # on the stream of the copy: query() says when it is done, with no sync
        else:
            self._values = tensor.detach().to("cpu")  # the CPU (no copy) or another backend (rare)

    def result(self) -> tuple[float, int] | None | bool:
        """``(token-weighted S, sequences)`` when read; ``False`` while the copy runs; ``None``: not packed."""
        if self._event is not None and not self._event.query():
            return False
        values = self._values.tolist()
        lengths = lengths_from(self.key, values)
        if self.key == "position_ids" and len(lengths) <= self.rows:
            return None  # no reset inside a row: not packed, dim 1 is S
        s = weighted_length(lengths)
        return None if s is None else (s, len(lengths))


def packed_read(example: Any) -> PackedRead | None:
    """A read of the example's ``cu_seqlens`` / ``position_ids`` (an integer tensor), or ``None`` without one."""
    with contextlib.suppress(Exception):  # an unreadable batch has no packing S
        kwargs = example[1] if example and isinstance(example[1], Mapping) else {}
        for key in PACKING_KEYS:
            tensor = kwargs.get(key)
            if tensor is not None and hasattr(tensor, "dtype") and not tensor.is_floating_point():
                import torch

                return PackedRead(key, tensor, torch)
    return None
