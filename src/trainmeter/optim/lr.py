"""The learning rate of an optimizer, read from its ``param_groups`` (docs/spec.md section 7).

A plain dict read: no device work. ``lr`` is the first group's rate; when the groups' rates differ, each group also
gets ``lr/<group>`` (its ``name``, else its index).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LR_SERIES = "lr"


def group_label(group: Any, index: int) -> str:
    """``name`` of a param group when it is a non-empty string, else its index."""
    name = group.get("name") if hasattr(group, "get") else None
    return name if isinstance(name, str) and name else str(index)


def read_lrs(param_groups: Sequence[Any]) -> dict[str, Any]:
    """Return ``{"lr": first group's rate}``, plus ``{"lr/<group>": rate}`` per group when they differ; rates as
    stored (tensor rates are never compared, so such groups are always listed).

    Examples:
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.1}])
        {'lr': 0.1}
        >>> read_lrs([{"lr": 0.1}, {"lr": 0.01, "name": "head"}])
        {'lr': 0.1, 'lr/0': 0.1, 'lr/head': 0.01}
    """
    first = param_groups[0]["lr"]
    out: dict[str, Any] = {LR_SERIES: first}
    if len(param_groups) == 1:
        return out
    rates = [group["lr"] for group in param_groups]
    if all(type(rate) in (float, int) for rate in rates) and all(rate == first for rate in rates):
        return out
    for index, (group, rate) in enumerate(zip(param_groups, rates, strict=True)):
        out[f"{LR_SERIES}/{group_label(group, index)}"] = rate
    return out
