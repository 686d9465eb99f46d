"""Training lanes: one per (thread, optimizer) training a model, each counted by its own thread (docs/spec.md §2).

Lane 1 is the first training thread's primary optimizer: its counters are the step rule's and the probes'
(:class:`~trainmeter.core.steps.StepRecorder`, :class:`~trainmeter.core.probe_state.ProbeState`), untouched by
any other thread. Every other thread that trains gets a :class:`Lane` of its own: its steps, samples, pending
batch counts, loss parts and reentrancy flags are written by that thread only, so no update is lost and no lock
is taken per step.
The headline steps and tokens are the sums over the lanes (docs/spec.md §2, "Threads").
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from trainmeter.core.scalars import ScalarReader, StepLoss

LOSS_SERIES = "train_loss"
MAX_LANE_LOSSES = 4096
MAX_LANES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneRecord:
    """One lane as the passport names it.

    Attributes:
        lane: Lane number (1: the first training thread's primary optimizer).
        thread: Name of the thread that trains it.
        model: Class name of its root module, or ``None`` when none was found.
        optimizer: Class name of its optimizer.
        steps: Optimizer steps counted.
        tokens: Tokens or samples counted (``unit``).
        unit: ``"tokens"`` or ``"samples"``.
        step_s: Mean seconds per step between its first and last step, or ``None`` below 2 steps.
        loss_series: The series holding its loss.
    """

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
        return {"lane": self.lane, "thread": self.thread, "model": self.model, "optimizer": self.optimizer,
                "steps": self.steps, "tokens": self.tokens, "unit": self.unit, "step_s": self.step_s,
                "loss_series": self.loss_series}


class Lane:
    """The per-thread state of one thread training a model (lane 2, 3, ...), or of lane 1's thread for its flags.

    Written by its own thread only (``ident``); its counters are read by any thread (int reads).

    Args:
        ident: ``threading.get_ident()`` of its thread.
        thread: The thread's name.
        hot: Whether it is lane 1's thread (whose counters and losses are the hot state's).
    """

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
        first, last, steps = self.first_t_s, self.last_t_s, self.steps
        step_s = (last - first) / (steps - 1) if first is not None and last is not None and steps > 1 else None
        return LaneRecord(lane=self.number, thread=self.thread, model=self.root_name, optimizer=self.optimizer_name,
                          steps=steps, tokens=self.tokens, unit=self.unit or unit, step_s=step_s,
                          loss_series=self.loss_name)


def lane_loss_series(number: int) -> str:
    """The loss series of lane ``number`` (lane 1's is the headline ``train_loss``)."""
    return LOSS_SERIES if number == 1 else f"{LOSS_SERIES}.lane{number}"
