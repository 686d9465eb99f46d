"""The run log's record kinds as TypedDicts (docs/spec.md section 6): the keys each kind's records must hold, checked
against what the writer builds (tests/record/test_events.py)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class StartRecord(TypedDict):
    """First record of a log: the run's name, start and options (``options.run_root`` absolute)."""

    schema_version: int
    kind: Literal["start"]
    name: str
    started_at: str
    options: dict[str, Any]
    environment: dict[str, Any]


class RankRecord(TypedDict, total=False):
    """Second record of a rank's log: where its launch is and which rank it is; after these keys come
    ``RankIdentity.to_dict()``'s (ranks/seating.py: rank, world size, node, source, provenance...)."""

    schema_version: int
    kind: Literal["rank"]
    launch_dir: str
    pid: int
    device: str | None


class ColumnsRecord(TypedDict):
    """The points of one series since the last report: ``steps`` (tokens per step) or ``series``; ``step[i]``,
    ``t_us[i]`` (session microseconds), ``value[i]`` (``None`` if not finite) are one point; ``x`` its x axis."""

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
    """One report: counters, phases, throughput, memory, then each wing's ``on_report`` fields under its name (those
    listed here are the ones readers outside the wing look at)."""

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


class _CheckpointBase(TypedDict):
    schema_version: int
    kind: Literal["checkpoint"]
    step: int
    path: str | None
    bytes: int | None
    source: str


class CheckpointLogRecord(_CheckpointBase, total=False):
    """One checkpoint, written when it is recorded (passport ``checkpoints``' path, step, bytes and source: docs/spec.md
    section 9), so a killed run's checkpoints are read from its log; ``renamed_from``: the path of the record it
    replaces (a temp file renamed to its final name)."""

    renamed_from: str


class EndRecord(TypedDict):
    """Last record of a finished run."""

    schema_version: int
    kind: Literal["end"]
    status: str
    ended_at: str | None
    error: str | None


Record = (StartRecord | RankRecord | ColumnsRecord | IntervalRecord | GapRecord | HeartbeatRecord | CheckpointLogRecord
          | EndRecord)
