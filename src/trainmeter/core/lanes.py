"""Training lanes: one per (thread, optimizer) training a model, each counted by its own thread (docs/spec.md §2)."""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from trainmeter.core.scalars import ScalarReader, StepLoss

LOSS_SERIES = "train_loss"
MAX_LANE_LOSSES = 4096
MAX_LANES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneRecord:
    """One lane as the passport's ``lanes`` names it (docs/spec.md §2, "Threads"): ``model`` and ``optimizer`` are
    class names; ``step_s`` is :func:`mean_step_s`."""

    lane: int
    thread: str
    model: str | None
    optimizer: str | None
    steps: int
    tokens: int
    unit: str
    step_s: float | None
    loss_series: str

    def to_dict(self) -> dict[str, Any]:
        """The passport's ``lanes`` entry."""
        return asdict(self)


class Lane:
    """The state of one thread training a model (lane 2, 3, ...), or of lane 1's thread (``hot``) for its flags.
    Written by its own thread only (``ident``); its counters are read by any thread (int reads)."""

    __slots__ = ("ident", "thread", "hot", "number", "depth", "in_backward", "optimizer", "optimizer_name",
                 "root_id", "root_name", "unit", "seen", "pending_tokens", "calls", "loss", "scaled", "reader",
                 "losses", "series", "loss_name", "others", "steps", "tokens", "first_t_s", "last_t_s")

    def __init__(self, ident: int, thread: str, hot: bool = False) -> None:
        self.ident = ident
        self.thread = thread
        self.hot = hot
        self.number = 0  # set at its first step (lane numbers follow the order of first steps)
        self.depth = 0  # nesting of watched calls in this thread (the outermost one counts)
        self.in_backward = False
        self.optimizer: weakref.ReferenceType[Any] | None = None  # the first optimizer that stepped here
        self.optimizer_name: str | None = None
        self.root_id = 0
        self.root_name: str | None = None
        self.unit: str | None = None
        self.seen: dict[int, list[Any]] = {}  # before its root is known: module id -> [tokens, calls, unit]
        self.pending_tokens = 0
        self.calls = 0
        self.loss: StepLoss | None = None  # the step's loss parts so far
        self.scaled: tuple[Any, Any, bool] | None = None  # the loss GradScaler.scale returned here, its scale
        self.reader = ScalarReader()  # its own deferred reads (a CUDA loss), polled at its steps
        self.losses: deque[StepLoss] = deque()  # closed losses waiting for their reads
        self.series: Any = None  # its loss series, once it has a point
        self.loss_name = LOSS_SERIES
        self.others: dict[int, int] = {}  # another optimizer stepped in this thread -> its number (2, 3, ...)
        self.steps = 0
        self.tokens = 0
        self.first_t_s: float | None = None
        self.last_t_s: float | None = None

    def record(self, unit: str) -> LaneRecord:
        """This lane as the passport names it (any thread)."""
        return LaneRecord(lane=self.number, thread=self.thread, model=self.root_name, optimizer=self.optimizer_name,
                          steps=self.steps, tokens=self.tokens, unit=self.unit or unit,
                          step_s=mean_step_s(self.first_t_s, self.last_t_s, self.steps), loss_series=self.loss_name)


def mean_step_s(first_t_s: float | None, last_t_s: float | None, steps: int) -> float | None:
    """Mean seconds per step between the first and last step, or ``None`` below 2 steps."""
    if first_t_s is None or last_t_s is None or steps < 2:
        return None
    return (last_t_s - first_t_s) / (steps - 1)


def lane_loss_series(number: int) -> str:
    """The loss series of lane ``number`` (lane 1's is the headline ``train_loss``)."""
    return LOSS_SERIES if number == 1 else f"{LOSS_SERIES}.lane{number}"
