"""The extension contract's rows: docs/contracts/EXTENSIONS.md shows them (:func:`events_table`), checked against
them and against the base's members (tests/core/test_extension.py, tests/test_layout.py)."""

from __future__ import annotations

from dataclasses import dataclass


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


def events_table() -> str:
    """The contract's table as docs/contracts/EXTENSIONS.md shows it (markdown; checked by tests/core)."""
    rows = ["| member | called | thread |", "| --- | --- | --- |"]
    rows += [f"| `{e.signature}` | {e.called} | {e.thread} |".replace(" | None", " \\| None") for e in EVENTS]
    return "\n".join(rows)
