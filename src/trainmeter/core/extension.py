"""The extension contract: the events the core sends a wing, their order from ``requires``, and a no-op base.

The core calls them only through :class:`trainmeter.core.dispatch.Dispatcher` (docs/contracts/EXTENSIONS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from trainmeter.core.context import RunContext

Edge = Literal["begin", "end"]
EVERY = "*"


@dataclass(frozen=True)
class Report:
    """What a report hands each ``on_report`` (docs/contracts/EXTENSIONS.md); ``ends``: each series' end position
    when read later on the report worker (``None``: now)."""

    steps: int
    tokens: int
    elapsed_s: float
    final: bool
    phases_s: Mapping[str, float]
    ends: Mapping[str, int] | None = None
    interval: Any = None
    memory: Any = None
    token_unit: str | None = "tokens"  # None: no batch read (docs/spec.md section 2)


class ExtensionBase:
    """A wing as the core sees it, with no-op events: subclass and define what the wing needs. ``on_step`` is
    ``None`` here: the core calls it on the hot path only for wings that define it."""

    name: str = "extension"
    requires: tuple[str, ...] = ()
    precedes: tuple[str, ...] = ()
    on_step: Callable[[], None] | None = None
    # True: a steady report may run this wing's on_report (and its text_fields and warnings after it) on the
    # report worker, after the training thread went on (docs/spec.md section 20); the wing's report-time state
    # is then touched by one thread at a time, and on_report must not schedule step hooks from there
    report_on_worker = False

    def start(self, monitor: RunContext) -> None:
        """Nothing to start (nor, as ``after_fork_in_child``, to re-home)."""

    after_fork_in_child = start

    def view(self) -> Any:
        return None

    passport_section = view

    def on_phase(self, name: str, edge: Edge, t_s: float) -> None:
        """Phases are not watched."""

    def on_report(self, report: Report) -> Mapping[str, Any] | None:
        return None

    def text_fields(self) -> Mapping[str, Any]:
        return {}

    def _no_items(self) -> list[Any]:
        return []

    warnings = tiles = panels = charts = markers = derivations = _no_items  # none of the lists

    def progress_bar(self, recent: Any = None) -> dict[str, Any] | None:
        return None

    def stop(self) -> None:
        """Nothing to release."""


Extension = ExtensionBase  # the contract's one form: its members are the events (tests/core/test_extension.py)


class RequirementError(ValueError):
    """A ``requires``/``precedes`` that names no wing, or requirements that form a cycle."""


def order_extensions(extensions: Iterable[Any], known: Collection[str] | None = None) -> list[Any]:
    """The extensions in a stable order honouring every ``requires`` and ``precedes``; ``known``: every wing name
    that may be asked for (``None``: any). ``RequirementError`` for a name not known, or a cycle."""
    exts: Sequence[Any] = list(extensions)
    names = [str(getattr(e, "name", e)) for e in exts]
    index = {n: i for i, n in enumerate(names)}
    after: list[set[int]] = [set() for _ in exts]  # after[i]: the extensions that must come before i

    def wants(ext: Any, attr: str) -> tuple[str, ...]:
        value = getattr(ext, attr, ())
        return tuple(value) if isinstance(value, (tuple, list)) else ()

    first = {i for i, e in enumerate(exts) if EVERY in wants(e, "precedes")}
    last = {i for i, e in enumerate(exts) if EVERY in wants(e, "requires")}
    for i, ext in enumerate(exts):
        for attr, exclude in (("requires", last), ("precedes", first)):
            for name in wants(ext, attr):  # '*': every other, but the others with the same '*'
                if name == EVERY:
                    named = [j for j in range(len(exts)) if j != i and j not in exclude]
                elif name in index:
                    named = [index[name]]
                elif known is not None and name not in known:
                    raise RequirementError(f"extension {names[i]!r} {attr} {name!r}, which is no known wing "
                                           f"(known: {', '.join(sorted(known))})")
                else:
                    named = []  # a known wing absent from this run
                for j in named:
                    later, sooner = (i, j) if attr == "requires" else (j, i)
                    after[later].add(sooner)
    placed: dict[int, None] = {}  # in order
    while len(placed) < len(exts):
        ready = next((i for i in range(len(exts)) if i not in placed and after[i] <= placed.keys()), None)
        if ready is None:
            stuck = [names[i] for i in range(len(exts)) if i not in placed]
            raise RequirementError(f"the requirements of {', '.join(stuck)} form a cycle")
        placed[ready] = None
    return [exts[i] for i in placed]
