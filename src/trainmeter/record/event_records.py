"""The run log's records: one TypedDict per record kind of ``events.jsonl`` and the writer's constructors.

Re-exported by :mod:`trainmeter.record.events` (the record wing's published view of the run log,
docs/spec.md section 6): import them from there. Pure; any thread.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, Union

SCHEMA_VERSION = 1


class StartRecord(TypedDict):
    """First record of a log: the run's name, start and options (``options.run_root`` absolute)."""

    schema_version: int
    kind: Literal["start"]
    name: str
    started_at: str
    options: dict[str, Any]
    environment: dict[str, Any]


class RankRecord(TypedDict, total=False):
    """Second record of a rank's log (a launch): where its launch is and which rank it is.

    Keys past ``device`` are those of :meth:`trainmeter.ranks.identity.RankIdentity.to_dict`.
    """

    schema_version: int
    kind: Literal["rank"]
    launch_dir: str
    pid: int
    device: str | None
    rank: int | None
    local_rank: int | None
    world_size: int
    local_world_size: int | None
    node_rank: int | None
    node: str
    launch_key: str | None
    backend: str | None
    source: str
    provenance: str


class ColumnsRecord(TypedDict):
    """The points of one series since the last report: ``steps`` (tokens per step) or ``series``.

    ``step[i]``, ``t_us[i]`` (session microseconds) and ``value[i]`` are one point; ``x`` says
    which of step or time is the series' x axis; a non-finite value is ``None``.
    """

    schema_version: int
    kind: Literal["steps", "series"]
    name: str
    x: Literal["step", "time"]
    step: list[int]
    t_us: list[int]
    value: list[float | None]


class Throughput(TypedDict):
    """The ``throughput`` of an interval record (``None`` before the first measured window)."""

    train_tokens_per_s: float | None
    seconds_per_step: float | None
    session_tokens_per_s: float | None
    window_tokens: int
    window_steps: int
    window_train_s: float


class _IntervalBase(TypedDict):
    schema_version: int
    kind: Literal["interval"]
    step: int
    tokens: int
    token_unit: str
    elapsed_s: float
    phases_s: dict[str, float]
    throughput: Throughput
    memory: dict[str, Any] | None


class IntervalRecord(_IntervalBase, total=False):
    """One report: counters, phases, throughput, memory, then each wing's fields under its name.

    The wing sections (``compute``, ``gpu``, ``distributed``, ``energy``, ...) are each extension's
    ``on_report`` fields; the keys listed here are those readers outside the wing look at.
    """

    compute: dict[str, Any]
    distributed: dict[str, Any]
    energy: dict[str, Any]
    gpu: dict[str, Any]


class GapRecord(TypedDict):
    """A closed span the log could not be written (a full disk), written once writes work again."""

    schema_version: int
    kind: Literal["gap"]
    from_step: int
    to_step: int | None
    failed_writes: int
    dropped_points: int
    error: str


class HeartbeatRecord(TypedDict):
    """Written by a thread of ours when no report came for an interval: the step in progress and since when."""

    schema_version: int
    kind: Literal["heartbeat"]
    step: int
    steps_done: int
    step_running_s: float
    phase: str
    elapsed_s: float
    since_report_s: float


class EndRecord(TypedDict):
    """Last record of a finished run."""

    schema_version: int
    kind: Literal["end"]
    status: str
    ended_at: str | None
    error: str | None


Record = Union[StartRecord, RankRecord, ColumnsRecord, IntervalRecord, GapRecord, HeartbeatRecord, EndRecord]


# --- the writer's constructors (field order is the line's key order) ------------------------------

def start_record(*, name: str, started_at: str, options: dict[str, Any], environment: dict[str, Any]) -> StartRecord:
    """The ``start`` record."""
    return {"schema_version": SCHEMA_VERSION, "kind": "start", "name": name, "started_at": started_at,
            "options": options, "environment": environment}


def rank_record(*, launch_dir: str, pid: int, device: str | None, identity: dict[str, Any]) -> RankRecord:
    """The ``rank`` record of one rank's log (``identity``: ``RankIdentity.to_dict()``)."""
    record = {"schema_version": SCHEMA_VERSION, "kind": "rank", "launch_dir": launch_dir, "pid": pid,
              "device": device, **identity}
    return record  # type: ignore[return-value]


def columns_record(kind: str, *, name: str, x: str, step: list[int], t_us: list[int],
                   value: list[Any]) -> ColumnsRecord:
    """A ``steps`` or ``series`` record (``kind``); ``x`` is ``step`` or ``time``."""
    record = {"schema_version": SCHEMA_VERSION, "kind": kind, "name": name, "x": x, "step": step, "t_us": t_us,
              "value": value}
    return record  # type: ignore[return-value]


def interval_record(*, step: int, tokens: int, token_unit: str, elapsed_s: float, phases_s: dict[str, float],
                    throughput: Throughput, memory: dict[str, Any] | None,
                    sections: dict[str, Any]) -> IntervalRecord:
    """The ``interval`` record; ``sections`` are the wings' fields, by extension name."""
    record = {"schema_version": SCHEMA_VERSION, "kind": "interval", "step": step, "tokens": tokens,
              "token_unit": token_unit, "elapsed_s": elapsed_s, "phases_s": phases_s, "throughput": throughput,
              "memory": memory, **sections}
    return record  # type: ignore[return-value]


def gap_record(*, from_step: int, to_step: int | None, failed_writes: int, dropped_points: int,
               error: str) -> GapRecord:
    """The ``gap`` record."""
    return {"schema_version": SCHEMA_VERSION, "kind": "gap", "from_step": from_step, "to_step": to_step,
            "failed_writes": failed_writes, "dropped_points": dropped_points, "error": error}


def heartbeat_record(*, step: int, steps_done: int, step_running_s: float, phase: str, elapsed_s: float,
                     since_report_s: float) -> HeartbeatRecord:
    """The ``heartbeat`` record (docs/spec.md section 18); ``phase``: the open ``tm.phase``, else ``train``."""
    return {"schema_version": SCHEMA_VERSION, "kind": "heartbeat", "step": step, "steps_done": steps_done,
            "step_running_s": step_running_s, "phase": phase, "elapsed_s": elapsed_s, "since_report_s": since_report_s}


def end_record(*, status: str, ended_at: str | None, error: str | None) -> EndRecord:
    """The ``end`` record."""
    return {"schema_version": SCHEMA_VERSION, "kind": "end", "status": status, "ended_at": ended_at, "error": error}
