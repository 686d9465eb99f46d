"""State patches: what changed between two ``state`` dicts (docs/protocol.md section 2); a bool that becomes a number is
sent; js/src/statestore.ts applies them (tests/widget/test_patch.py ``apply``: the same rule). Pure functions."""

from __future__ import annotations

from typing import Any

Path = list[str | int]
Op = list[Any]  # [path] (delete) or [path, value] (set)


def diff(old: Any, new: Any) -> list[Op]:
    """The operations that turn ``old`` into ``new`` (both JSON-like); ``[]`` when equal."""
    ops: list[Op] = []
    _diff(old, new, [], ops)
    return ops


def _diff(a: Any, b: Any, path: Path, ops: list[Op]) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if a == b:
            return
        kept_a = [k for k in a if k in b]
        kept_b = [k for k in b if k in a]
        added = [k for k in b if k not in a]
        if kept_a != kept_b or (added and list(b)[-len(added):] != added):  # the order changed: set whole
            ops.append([path, b])
            return
        ops.extend([[*path, k]] for k in a if k not in b)
        for k, v in b.items():
            if k in a:
                _diff(a[k], v, [*path, k], ops)
            else:
                ops.append([[*path, k], v])
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        if a == b:
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, [*path, i], ops)
    elif a != b or isinstance(a, bool) != isinstance(b, bool):  # True == 1 in Python, not in JSON
        ops.append([path, b])


class Revisions:
    """The state a front end holds, numbered from ``start``'s ``rev`` (else 0): each new state is sent as a patch of
    the last (docs/protocol.md). ``full``: the last state noted, whole, with its ``rev`` (replaced, never mutated:
    any thread may read it)."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.last = dict(start)
        self.rev = int(self.last.get("rev") or 0)
        self.full: dict[str, Any] | None = None

    def note(self, state: dict[str, Any]) -> list[Op]:
        """Take ``state`` as the front end's next one; returns the patch from the last (``[]``: unchanged)."""
        ops = diff(self.last, state)
        if ops or self.full is None:
            self.rev += bool(ops)
            self.last = state
            self.full = {**state, "rev": self.rev}
        return ops

