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
    """What a report hands each extension's ``on_report`` (docs/contracts/EXTENSIONS.md): the counts, session
    seconds and phase seconds at the report, whether it is the last, each series' end position when read later on
    the report worker (``None``: now), and the report's ``IntervalSummary`` and memory sample."""

    steps: int
    tokens: int
    elapsed_s: float
    final: bool
    phases_s: Mapping[str, float]
    ends: Mapping[str, int] | None = None
    interval: Any = None
    memory: Any = None
    token_unit: str | None = "tokens"  # None: no batch read (docs/spec.md section 2)


@dataclass(frozen=True)
class Event:
    """One row of the contract: a member of :class:`Extension`, when the core calls it and from which thread."""

    name: str
    signature: str
    called: str
    thread: str


# The contract's rows, in the order a run meets them; docs/contracts/EXTENSIONS.md is checked against
# them and against the Protocol's members (tests/core/test_extension.py).
EVENTS: tuple[Event, ...] = (
    Event("name", "name: str", "key of its passport section, interval fields and warnings", "-"),
    Event("requires", "requires: tuple[str, ...]",
          "wings it reads (run before it when present; '*' = every other wing)", "-"),
    Event("precedes", "precedes: tuple[str, ...]", "wings that run after it when present ('*' = every other)", "-"),
    Event("start", "start(context) -> None", "once, after the run folder exists, before the cell's code runs",
          "training"),
    Event("view", "view() -> object | None", "by `context.extension(name)`: the small frozen view other wings "
          "read (`<wing>/view.py`)", "any"),
    Event("on_step", "on_step() -> None", "(`None` on the base) after a counted step of the primary optimizer, "
          "before the report check; at every step until it calls `context.next_step_hook_at(step, self)` "
          "(skipped steps cost one integer compare); only defined by wings that need it", "training (hot path)"),
    Event("on_phase", "on_phase(name, edge, t_s) -> None", "a `tm.phase`/span `name` began or ended "
          "(`edge` 'begin'/'end', `t_s` seconds since the session began); ('train', 'begin') when training "
          "activity is seen while a wing asked with `context.watch_training(self)`", "training"),
    Event("on_report", "on_report(report) -> dict | None", "at each report (`Report`); a dict becomes the "
          "run log's `interval[name]`; a wing with `report_on_worker = True` gets a steady report on the report "
          "worker, in order, with the report's snapshot (`Report.ends`)", "training (or the report worker)"),
    Event("text_fields", "text_fields() -> dict", "extra `key=value` fields of the text line (`mfu` and "
          "`loss_ema` have fixed places)", "training (or the report worker)"),
    Event("warnings", "warnings() -> list[str]", "current warnings for the widget and text line", "any"),
    Event("tiles", "tiles() -> list[dict]", "extra tiles (docs/protocol.md)", "publisher: read-only"),
    Event("panels", "panels() -> list[dict]", "generic panels (docs/protocol.md)", "publisher: read-only"),
    Event("charts", "charts() -> list[dict]", "chart specs naming series it records", "publisher: read-only"),
    Event("markers", "markers() -> list[dict]", "chart markers", "publisher: read-only"),
    Event("progress_bar", "progress_bar(recent) -> dict | None", "the header's progress bar (the first non-None); "
          "`recent`: the publisher's recent figures (the ETA's pace) or None", "publisher: read-only"),
    Event("stop", "stop() -> None", "once at the end, in order, before the final report (idempotent; joins "
          "its threads, removes every hook and patch)", "training"),
    Event("passport_section", "passport_section() -> dict, list or None", "once at the end: "
          "`passport.json[name]` (None: no section)", "training"),
    Event("derivations", "derivations() -> list[Derivation]", "appended to the passport's `derivations`",
          "training"),
    Event("after_fork_in_child", "after_fork_in_child(context) -> None", "in a forked child, after the ranks "
          "wing re-homed the inherited run: the wing makes its state the child's own (also when a report worker "
          "job of its was under way at the fork; a wing without it is then left out: docs/spec.md section 19)",
          "the child's forking thread"),
)


class ExtensionBase:
    """A wing as the core sees it, with no-op events: subclass and define what the wing needs (:data:`EVENTS` says
    when each is called). ``on_step`` is ``None`` here: the core calls it on the hot path only for wings that define
    it as a method."""

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


def events_table() -> str:
    """The contract's table as docs/contracts/EXTENSIONS.md shows it (markdown; checked by tests/core)."""
    rows = ["| member | called | thread |", "| --- | --- | --- |"]
    rows += [f"| `{e.signature}` | {e.called} | {e.thread} |".replace(" | None", " \\| None") for e in EVENTS]
    return "\n".join(rows)


class RequirementError(ValueError):
    """A ``requires``/``precedes`` that names no wing, or requirements that form a cycle."""


def _named(name: str, i: int, index: Mapping[str, int], names: Sequence[str], known: Collection[str] | None,
           attr: str, exclude: Collection[int]) -> list[int]:
    """The positions ``name`` stands for in extension ``i``'s ``attr`` (``'*'``: every other, less ``exclude``)."""
    if name == EVERY:
        return [j for j in range(len(names)) if j != i and j not in exclude]
    if name in index:
        return [index[name]]
    if known is not None and name not in known:
        raise RequirementError(f"extension {names[i]!r} {attr} {name!r}, which is no known wing "
                               f"(known: {', '.join(sorted(known))})")
    return []  # a known wing absent from this run


def order_extensions(extensions: Iterable[Any], known: Collection[str] | None = None) -> list[Any]:
    """The extensions (objects with a ``name``) in an order that honours every ``requires`` and ``precedes``
    (stable); ``known``: every wing name that may be asked for (``None``: any). ``RequirementError`` for a name
    not known, or a cycle."""
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
        for name in wants(ext, "requires"):  # name (or every other, but the other '*'-requirers) before i
            for j in _named(name, i, index, names, known, "requires", exclude=last):
                after[i].add(j)
        for name in wants(ext, "precedes"):  # i before name (or every other, but the other '*'-precedes)
            for j in _named(name, i, index, names, known, "precedes", exclude=first):
                after[j].add(i)
    placed: list[int] = []
    done: set[int] = set()
    while len(placed) < len(exts):
        ready = next((i for i in range(len(exts)) if i not in done and after[i] <= done), None)
        if ready is None:
            stuck = [names[i] for i in range(len(exts)) if i not in done]
            raise RequirementError(f"the requirements of {', '.join(stuck)} form a cycle")
        placed.append(ready)
        done.add(ready)
    return [exts[i] for i in placed]
