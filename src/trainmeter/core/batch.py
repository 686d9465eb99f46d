"""Tokens (or samples) in a batch, read from shapes only (no data access, no sync).

:func:`count_batch` and :func:`batch_seq` keep no state; :class:`BatchCounter` keeps the last positional batch's
answer and S for one run's probes (an object per run and per lane, never a module global).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_TOKEN_KEYS = ("input_ids", "idx", "tokens", "input", "x")


def _first_tensor(value: Any, depth: int = 0) -> Any:
    if hasattr(value, "is_floating_point") and hasattr(value, "shape"):
        return value
    if depth > 2:
        return None
    if type(value) is dict or isinstance(value, Mapping):
        for key in _TOKEN_KEYS:
            if key in value:
                found = _first_tensor(value[key], depth + 1)
                if found is not None:
                    return found
        for item in value.values():
            found = _first_tensor(item, depth + 1)
            if found is not None:
                return found
    elif type(value) in (tuple, list) or isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for item in value[:4]:
            found = _first_tensor(item, depth + 1)
            if found is not None:
                return found
    return None


def _batch_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> Any:
    """The tensor a batch is counted by: the keyword arguments' first, else the positional ones'."""
    tensor = _first_tensor(kwargs) if kwargs else None
    if tensor is None and args:
        first = args[0]
        tensor = first if hasattr(first, "is_floating_point") else _first_tensor(args)
    return tensor


def _count(tensor: Any) -> tuple[tuple[int, str] | None, int]:
    """``((count, unit), S)`` of a batch tensor (S: dim 1 of 2-D or larger token ids, else 0)."""
    shape = tensor.shape
    if not shape:
        return None, 0
    if not tensor.is_floating_point() and not tensor.is_complex() and str(tensor.dtype) != "torch.bool":
        if len(shape) >= 2:
            seq = int(shape[1])
            return (int(shape[0]) * seq, "tokens"), seq
        return (int(shape[0]), "tokens"), 0
    return (int(shape[0]), "samples"), 0


def count_batch(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """Return ``(count, unit)`` for the batch a root module received.

    Integer tensors are token ids: a 2-D or larger tensor counts batch x sequence, a 1-D one (packed sequences)
    counts its length; the unit is ``"tokens"``. Any other tensor counts its first dimension as ``"samples"``.
    Padding is counted as tokens (reading a mask would need its values). Keyword arguments are searched first.

    Returns:
        ``None`` when no tensor is found.
    """
    tensor = _batch_tensor(args, kwargs)
    return None if tensor is None else _count(tensor)[0]


def batch_seq(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> int:
    """S of a batch found as :func:`count_batch` finds it (dim 1 of 2-D token ids, else 0), without counting it."""
    tensor = _batch_tensor(args, kwargs)
    return 0 if tensor is None else _count(tensor)[1]


def token_key(kwargs: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """The keyword whose value :func:`count_batch` counts a keyword-only batch by, when it is a tensor under one of
    the token keys, and the token keys before it (absent from this call): a later call with none of those and a
    tensor of the same type, shape and dtype under that keyword counts the same. ``None`` otherwise."""
    for i, key in enumerate(_TOKEN_KEYS):
        if key in kwargs:
            value = kwargs[key]
            if hasattr(value, "is_floating_point") and hasattr(value, "shape"):
                return key, _TOKEN_KEYS[:i]
            return None
    return None


class BatchCounter:
    """:func:`count_batch` for one run's probes (or one lane): a positional-only batch whose tensor has the type,
    shape and dtype of the last one counted here gets the same answer without being read again, and ``seq`` holds
    S of the batch counted last (dim 1 of 2-D token ids; 0: none).

    The thread that owns the probes (or the lane) only.
    """

    __slots__ = ("_last", "seq")

    def __init__(self) -> None:
        self._last: tuple[Any, Any, Any, Any, int] = (None, None, None, None, 0)  # type, shape, dtype -> count, S
        self.seq = 0

    def count(self, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> tuple[int, str] | None:
        """As :func:`count_batch`; sets ``seq``."""
        if args and not kwargs:
            first = args[0]
            last = self._last
            if type(first) is last[0] and first.shape == last[1] and first.dtype is last[2]:
                self.seq = last[4]
                return last[3]
            if hasattr(first, "is_floating_point") and hasattr(first, "shape"):
                counted, self.seq = _count(first)
                self._last = (type(first), first.shape, first.dtype, counted, self.seq)
                return counted
        tensor = _batch_tensor(args, kwargs)
        if tensor is None:
            self.seq = 0
            return None
        counted, self.seq = _count(tensor)
        return counted
