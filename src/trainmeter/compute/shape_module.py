"""Read a :class:`~trainmeter.compute.model_shape.ModelShape` from a ``torch.nn.Module``: parameters counted without
touching their data (the meta device works); torch imported inside the function. And the sequence length S the
attention terms use where the batch packs sequences: token-weighted, ``sum(l * l) / sum(l)`` (docs/spec.md section 5,
"S"); a device's packed lengths come through a non-blocking copy polled at later reports, no sync (never raises).
"""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from trainmeter.compute.model_shape import ModelShape, shape_from_config

_HEAD_ATTRS = ("num_heads", "n_head", "n_heads", "num_attention_heads")
_TOPK_ATTRS = ("top_k", "num_experts_per_tok", "k")
_COUNTS = ("n_params", "n_embedding_params", "n_active_params", "tied_embeddings", "n_trained_params",
           "n_trained_embedding_params", "n_backward_params", "n_backward_embedding_params", "backward_layers")


def _numel(params: Any) -> int:
    return sum(int(p.numel()) for p in params)


def _owned(modules: list[Any]) -> list[Any]:
    """The parameters the ``modules`` hold themselves, each tensor once."""
    return list({id(p): p for m in modules for p in m.parameters(recurse=False)}.values())


def _frozen_split(root: Any, lookup_ids: set[int], blocks: list[Any]) -> dict[str, int]:
    """N_t, E_t (trained), N_b, E_b and L_b (on the backward's path: docs/spec.md section 5, "Frozen weights"), from
    ``requires_grad`` and module order; a tensor is on the path when a module owning it comes later."""
    order = [m for _, m in root.named_modules()]
    first = next((i for i, m in enumerate(order) if any(p.requires_grad for p in m.parameters(recurse=False))),
                 len(order))
    trained = [p for p in _owned(order) if p.requires_grad]
    backward = _owned(order[first + 1:])
    after = {id(m) for m in order[first + 1:]}
    return {"n_trained_params": _numel(trained),
            "n_trained_embedding_params": _numel(p for p in trained if id(p) in lookup_ids),
            "n_backward_params": _numel(backward),
            "n_backward_embedding_params": _numel(p for p in backward if id(p) in lookup_ids),
            "backward_layers": sum(1 for b in blocks if any(id(m) in after for m in b.modules()))}


def _repeated_blocks(root: Any, nn: Any) -> tuple[str, list[Any], str] | None:
    """Return (path, blocks, class name) of the largest run of same-class composite blocks in a ModuleList/Sequential."""
    best: tuple[int, str, list[Any], str] | None = None
    for path, module in root.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or path.split(".")[-1].endswith("experts"):
            continue
        groups: dict[type, list[Any]] = defaultdict(list)
        for child in module.children():
            groups[type(child)].append(child)
        for cls, items in groups.items():
            if len(items) < 2 or not all(next(c.children(), None) is not None for c in items):  # blocks, not leaves
                continue
            size = sum(_numel(c.parameters()) for c in items)
            if best is None or size > best[0]:
                best = (size, path or "<root>", items, cls.__name__)
    return None if best is None else (best[1], best[2], best[3])


def _heads(root: Any, nn: Any) -> tuple[int, str] | None:
    """Return (heads, source) from nn.MultiheadAttention or a ``num_heads``-style attribute."""
    for path, module in root.named_modules():
        if isinstance(module, nn.MultiheadAttention):
            return int(module.num_heads), f"{path}: nn.MultiheadAttention.num_heads"
        found = _int_attrs(module, _HEAD_ATTRS)
        if found:
            return found[0][1], f"{path or '<root>'}.{found[0][0]}"
    return None


def _int_attrs(module: Any, names: tuple[str, ...]) -> list[tuple[str, int]]:
    """The attributes of ``names`` that ``module`` holds as a positive int, in order: (name, value)."""
    found = ((attr, getattr(module, attr, None)) for attr in names)
    return [(a, v) for a, v in found if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def _experts(root: Any, nn: Any, k: int | None) -> tuple[int, int, int | None, str] | None:
    """(experts per list, inactive params, top_k, source) over ModuleLists named ``*experts``; ``k``: the config's."""
    lists = [(p, m) for p, m in root.named_modules() if isinstance(m, nn.ModuleList) and p.endswith("experts")]
    if not lists:
        return None
    count = len(list(lists[0][1].children()))
    if k is None:
        parent = root.get_submodule(lists[0][0].rpartition(".")[0]) if "." in lists[0][0] else root
        k = next((v for _, v in _int_attrs(parent, _TOPK_ATTRS)), None)
    if k is None:
        return count, 0, None, f"{len(lists)} ModuleLists named *experts"
    sizes = [(len(list(module.children())), _numel(module.parameters())) for _, module in lists]
    inactive = sum(int(round(max(n - k, 0) * (total / n))) for n, total in sizes if n)
    return count, inactive, k, f"{len(lists)} ModuleLists named *experts, top-{k}"


def shape_from_module(module: Any) -> ModelShape:
    """Read a :class:`ModelShape` from a ``torch.nn.Module`` (compiled ones through ``_orig_mod``; meta works): the
    parameter counts ``counted``, the structure from a ``.config`` first, then from the modules (docs/spec.md section
    5). Reads shapes only."""
    import torch.nn as nn

    root = getattr(module, "_orig_mod", module)
    from_config = shape_from_config(getattr(root, "config", None))  # no config: an empty shape
    shape = ModelShape()

    n = _numel(root.parameters())
    owners: dict[int, list[Any]] = defaultdict(list)
    for sub in root.modules():
        for p in sub.parameters(recurse=False):
            owners[id(p)].append(sub)
    tables: list[tuple[str, Any, bool]] = []  # (path, module, lookup-only)
    seen: set[int] = set()
    for path, sub in root.named_modules():
        if isinstance(sub, (nn.Embedding, nn.EmbeddingBag)) and id(sub.weight) not in seen:
            seen.add(id(sub.weight))
            lookup_only = all(isinstance(o, (nn.Embedding, nn.EmbeddingBag)) for o in owners[id(sub.weight)])
            tables.append((path, sub, lookup_only))
    e = sum(_numel([t.weight]) for _, t, lookup in tables if lookup)
    table_text = ", ".join(f"{p}{'' if lk else ' (tied)'}" for p, _, lk in tables) or "no nn.Embedding"
    shape = shape.with_value("n_params", n, "counted", "parameters of the module (trained or frozen), each tensor once")
    shape = shape.with_value("n_embedding_params", e, "counted", f"lookup-only embedding tables: {table_text}")

    if tables:
        out_dims = {m.out_features for m in root.modules() if isinstance(m, nn.Linear)}
        tied = [t for t in tables if not t[2]]
        head_sized = [t for t in tables if t[1].num_embeddings in out_dims]
        token = (tied or head_sized or sorted(tables, key=lambda t: -t[1].num_embeddings))[0]
        path, table, lookup = token
        what = f"{path}: nn.Embedding({table.num_embeddings}, {table.embedding_dim})"
        shape = shape.with_value("d_model", int(table.embedding_dim), "detected", what)
        shape = shape.with_value("vocab", int(table.num_embeddings), "detected", what)
        tie = f"{path} shared with a non-embedding module" if not lookup else f"{path} used only as a lookup"
        shape = shape.with_value("tied_embeddings", not lookup, "detected", tie)
        others = [t for t in tables if t is not token and t[1].embedding_dim == table.embedding_dim]
        if others:
            pos_path, pos, _ = max(others, key=lambda t: t[1].num_embeddings)
            rows = int(pos.num_embeddings)
            shape = shape.with_value("learned_positions", rows, "detected", f"{pos_path}: nn.Embedding({rows}, ...)")
            shape = shape.with_value("seq_len", rows, "assumed",
                                     f"{pos_path} size (context length; the batch's sequence length replaces it)")
    blocks = _repeated_blocks(root, nn)
    if blocks is not None:
        path, items, cls = blocks
        shape = shape.with_value("layers", len(items), "detected", f"{path}: {len(items)} x {cls}")
    lookup_ids = {id(t.weight) for _, t, lookup in tables if lookup}
    split = _frozen_split(root, lookup_ids, blocks[1] if blocks is not None else [])
    if split["n_trained_params"] < n:
        for name, value in split.items():
            if name == "backward_layers" and blocks is None:
                continue
            src = ("parameters with requires_grad" if "trained" in name else
                   "modules after the first one holding a trained parameter (registration order)")
            shape = shape.with_value(name, value, "counted", src)
    heads = _heads(root, nn)
    if heads is not None:
        shape = shape.with_value("heads", heads[0], "detected", heads[1])
    experts = _experts(root, nn, from_config.moe_top_k)
    if experts is not None:
        count, inactive, k, src = experts
        shape = shape.with_value("moe_experts", count, "detected", src)
        if k is not None:
            shape = shape.with_value("moe_top_k", k, "detected", src)
            shape = shape.with_value("n_active_params", n - inactive, "counted", f"N minus inactive experts ({src})")
    elif not from_config.is_moe:
        shape = shape.with_value("n_active_params", n, "counted", "dense model: active = N")

    # The config wins for structural fields; the counts (N, E, active) stay counted.
    merged = shape.merged_under(from_config.merged_under(shape), names=_COUNTS)
    if experts is None and from_config.is_moe and from_config.n_active_params and from_config.n_params:
        inactive = from_config.n_params - from_config.n_active_params
        merged = merged.with_value("n_active_params", n - inactive, "detected",
                                   "counted N minus the config's inactive experts")
    elif experts is None and from_config.is_moe:
        merged = merged.with_value("n_active_params", None, "assumed", "")
    return merged


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
        lengths = lengths_from(self.key, self._values.tolist())
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
