"""What the record sinks read of a run: a Protocol (:class:`trainmeter.core.monitor.Monitor` satisfies it), so
record/ imports no monitor. Read on the training thread at reports and at the end of the run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.memory import MemoryReading
from trainmeter.core.series import Series, StepSeries
from trainmeter.core.throughput import IntervalSummary, SessionSummary


class RunView(Protocol):
    """A run as the run log, text line and passport see it."""

    options: Any
    status: str
    error: str | None
    started_at: str | None
    ended_at: str | None
    run_dir: Path | None
    steps: int
    tokens: int
    token_unit: str
    series: dict[str, Series]
    step_series: Series | StepSeries
    interval: IntervalSummary | None
    session: SessionSummary | None
    memory: MemoryReading | None
    warnings: list[str]
    dispatch: Dispatcher  # the extensions' events (text fields, passport sections)
    phases: Any

    @property
    def params(self) -> dict[str, Any]: ...

    def elapsed_s(self) -> float: ...

    def add_reader(self, drain: Callable[[dict[str, int]], None] | None = None) -> dict[str, int]: ...

    def warn_once(self, key: str, message: str) -> None: ...

    def set_run_dir(self, path: Path | None) -> None: ...
