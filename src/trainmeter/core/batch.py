"""Samples or tokens in a batch, read from shapes only (no data access, no sync): the batch rule, docs/spec.md
section 2 ("The batch rule"). Only :class:`BatchCounter` keeps state (one per run's probes, never a module global).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

_TOKEN_KEYS = ("input_ids", "idx", "tokens", "input", "x")
_COLUMN_IDS = "_input_ids"  # a flat mapping's column token ids (sentence-transformers: anchor_input_ids, ...)
_ITEMS = 4  # items of a sequence or mapping looked at for its first readable one

# a reading: (count, unit, tokens x S summed over its columns, what a sample is: "" or "graphs"/"nodes"), or the
# reason the batch could not be read (a str)
Reading = tuple[int, str, int, str] | str


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "is_floating_point") and hasattr(value, "shape")


def _tensor(tensor: Any) -> Reading:
    """Integer ids of rank >= 2: batch x sequence tokens; of rank 1: its length in tokens; else dim 0 samples."""
    shape = tensor.shape
    if not shape:
        return "a 0-d tensor"
    if not tensor.is_floating_point() and not tensor.is_complex() and str(tensor.dtype) != "torch.bool":
        if len(shape) >= 2:
            seq = int(shape[1])
            tokens = int(shape[0]) * seq
            return tokens, "tokens", tokens * seq, ""
        return int(shape[0]), "tokens", 0, ""
    return int(shape[0]), "samples", 0, ""


def _graph(value: Any) -> Reading | None:
    """A graph batch (``edge_index`` and a node tensor ``x``, as PyG's): its graphs (``num_graphs``) as samples, else
    its seed nodes (``batch_size``: a sampled subgraph), else its nodes (dim 0 of ``x``); ``None``: not one. Nothing
    of the graph library is imported; ``num_nodes`` is never asked (it may infer from the edges' values)."""
    edges = getattr(value, "edge_index", None)
    if not _is_tensor(edges):
        return None
    graphs = getattr(value, "num_graphs", None)
    if type(graphs) is int:
        return graphs, "samples", 0, "graphs"
    seeds = getattr(value, "batch_size", None)  # a sampled subgraph's seed nodes (PyG's NeighborLoader)
    if type(seeds) is int:
        return seeds, "samples", 0, "seeds"
    nodes = getattr(value, "x", None)
    if _is_tensor(nodes) and nodes.shape:
        return int(nodes.shape[0]), "samples", 0, "nodes"
    return f"a graph batch ({type(value).__name__}) with neither num_graphs nor a node tensor x"


SAMPLE_KINDS = {"graphs": "samples are graphs (a graph batch's num_graphs)",
                "seeds": "samples are seed nodes (a sampled graph batch's batch_size)",
                "nodes": "samples are nodes (dim 0 of a graph batch's node tensor x)"}
"""What a sample is, by the reading's kind (said in ``series_info.tokens_per_step.note``)."""


def _read(value: Any, depth: int) -> Reading:
    """The reading of one input of the trained call (the batch rule)."""
    if _is_tensor(value):
        return _tensor(value)
    if depth > 3:
        return "nested deeper than 3 levels"
    if isinstance(value, Mapping):  # one column: its token ids once (not its mask or labels)
        for key in _TOKEN_KEYS:
            if key in value:
                found = _read(value[key], depth + 1)
                if type(found) is tuple:
                    return found
        columns = [v for k, v in value.items() if isinstance(k, str) and k.endswith(_COLUMN_IDS)]
        if columns:  # columns flattened into one mapping (anchor_input_ids, positive_input_ids): each counts
            return _columns(columns, depth)
        items = list(value.values())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = value
    else:  # a known batch object (a graph batch), else unread
        found = _graph(value)
        return f"a {type(value).__name__}" if found is None else found
    if items and all(isinstance(item, Mapping) for item in items):  # columns (a contrastive pair): each counts
        return _columns(items, depth)
    return _first(items, depth)


def _first(items: Any, depth: int) -> Reading:
    """The first readable of a sequence's first items ((x, y) counts x once), else why the first is not."""
    why: str | None = None
    for item in islice(items, _ITEMS):
        if item is None:
            continue
        found = _read(item, depth + 1)
        if type(found) is tuple:
            return found
        why = why or found
    return why or "no input"


def _columns(items: Any, depth: int) -> Reading:
    """The sum over columns (feature dicts): each column's token ids once."""
    count, weighted, unit = 0, 0, ""
    for item in items:
        found = _read(item, depth + 1)
        if type(found) is not tuple:
            return found
        if unit and found[1] != unit:
            return "columns in tokens and in samples"
        count, weighted, unit = count + found[0], weighted + found[2], found[1]
    return count, unit, weighted, ""


def read_call(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> Reading:
    """The reading of a trained call's inputs: a keyword under a token key, else the positional arguments (the
    first readable), else the keyword arguments as one mapping."""
    if kwargs:
        for key in _TOKEN_KEYS:
            if key in kwargs:
                found = _read(kwargs[key], 1)
                if type(found) is tuple:
                    return found
        if not args:
            return _read(kwargs, 0)
    return _first(args, -1) if args else "no input"


def count_batch(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """``(count, unit)`` of the batch a root module received (the batch rule, docs/spec.md section 2), ``None`` when
    nothing readable was found (unknown, never 0). Every column counts once: a tensor by its shape (integer ids:
    ``"tokens"``, else dim 0 ``"samples"``), a mapping by its token ids (``input_ids``, ...), feature mappings (a
    contrastive batch) or ``<column>_input_ids`` by the sum of their columns, other sequences by their first
    readable item, a graph batch by its own fields."""
    found = read_call(args, kwargs)
    return (found[0], found[1]) if type(found) is tuple else None


def batch_seq(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> float:
    """S of a batch (token-weighted over its 2-D token id columns; an int when they agree), 0 without one."""
    return reading_seq(read_call(args, kwargs))


def reading_seq(found: Reading) -> float:
    """S of a reading (:func:`read_call`'s): tokens x S over tokens, 0 without 2-D token ids."""
    if type(found) is not tuple or not found[2]:
        return 0
    seq = found[2] / found[0]
    return int(seq) if seq == int(seq) else seq


def token_key(kwargs: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """The token keyword a keyword-only batch is counted by (its value a tensor) and the token keys before it: a call
    with none of those and a tensor like it under that keyword counts the same. ``None`` otherwise."""
    for i, key in enumerate(_TOKEN_KEYS):
        if key in kwargs:
            value = kwargs[key]
            if _is_tensor(value):
                return key, _TOKEN_KEYS[:i]
            return None
    return None


class BatchCounter:
    """:func:`count_batch` for one run's probes: a positional batch whose first argument is a tensor like the last
    one counted gets the same answer unread. ``seq``: S of the batch counted last (0: none); ``kind``: what its
    samples are (``""``: the unit says it); ``unread``: why the last batch not read was not. Its owner thread only.
    """

    __slots__ = ("_last", "seq", "kind", "unread")

    def __init__(self) -> None:
        self._last: tuple[Any, Any, Any, Any, float] = (None, None, None, None, 0)  # type, shape, dtype -> count, S
        self.seq: float = 0
        self.kind = ""
        self.unread: str | None = None

    def count(self, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> tuple[int, str] | None:
        """As :func:`count_batch`; sets ``seq``, ``kind`` and (when nothing is read) ``unread``."""
        first = args[0] if args and not kwargs else None
        last = self._last
        if first is not None and type(first) is last[0] and first.shape == last[1] and first.dtype is last[2]:
            self.seq, self.kind = last[4], ""
            return last[3]
        found = read_call(args, kwargs)
        if type(found) is not tuple:
            self.seq, self.kind, self.unread = 0, "", found
            return None
        self.seq, self.kind = reading_seq(found), found[3]
        counted = found[0], found[1]
        if _is_tensor(first) and first.shape:  # read by its shape: the next one like it is not read again
            self._last = (type(first), first.shape, first.dtype, counted, self.seq)
        return counted
