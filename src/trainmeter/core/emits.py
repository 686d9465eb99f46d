"""Emitted values: ``tm.emit``, taps and samplers' points, checked one by one and recorded by one writer per series.

Other threads' values are queued (bounded) and folded by the ``trainmeter-emits`` thread (docs/spec.md §18).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmeter.core.scalars import ScalarReader
from trainmeter.core.series_registry import SeriesRegistry
from trainmeter.core.steps import LATE_USER_LOSS, LOSS_SERIES, StepRecorder
from trainmeter.core.text import printable
from trainmeter.core.threads import OurThread

MAX_QUEUED = 100_000
MAX_REFUSED_NAMES = 10_000  # names whose values are refused by name, remembered (past it: refused by the registry)
FOLD_WAKE_S = 0.05
FOLD_PER_WAKE = 1_000
OWNER_DRAIN = 10_000
STOP_WAIT_S = 0.5


class Emitter:
    """The run's emitted values: the recording thread's, the cross-thread queue and its folding thread; ``report``
    when a value finds the next report due. :meth:`record`: any thread."""

    def __init__(self, registry: SeriesRegistry, steps: StepRecorder, warn_once: Callable[[str, str], None],
                 report: Callable[[], None]) -> None:
        self._registry = registry
        self._steps = steps
        self._warn_once = warn_once
        self._report = report
        self.new_run(threading.get_ident())  # the recording thread (set again at start)

    def new_run(self, owner_ident: int) -> None:
        """Nothing queued, no folding thread, ``owner_ident`` records (a start; a forked child's own run)."""
        self.owner_ident = owner_ident
        self._queued: deque[tuple[dict[str, Any], int]] = deque()  # values from other threads (any appends)
        self._side_names: set[str] = set()  # series the folding thread writes (it alone)
        self._to_owner: deque[tuple[str, Any, int]] = deque()  # values for series the recording thread writes
        self._folder: threading.Thread | None = None
        self._folder_lock = threading.Lock()
        self._folder_stop = threading.Event()  # set once closed
        self._fold_reader = ScalarReader()  # the folding thread's deferred reads (CUDA values)
        self._refused: set[str] = set()  # names refused as names (reserved, past the cap): each value only counted
        self._bad_said: set[str] = set()  # names whose unreadable value was said: later ones only counted
        self._full_said = False
        self.dropped = 0
        self.ignored = 0  # values left out as bad (an unreadable value, a refused name): passport emits_ignored

    def record(self, values: dict[str, Any], step: int | None = None) -> None:
        """Record named scalars at ``step`` (default: now); a bad value is left out, warned. Never raises."""
        if threading.get_ident() != self.owner_ident:
            self._enqueue(values, step)
            return
        steps = self._steps
        now = steps.now()
        t_s = now - steps.t0_s
        if step is None:
            step = steps.steps
        registry = self._registry
        known = registry.series
        side = self._side_names
        fresh: list[tuple[str, float]] = []  # values of names without a series yet: created in one copy below
        for name, value in values.items():
            existing = known.get(name) if type(value) is float else None
            if existing is not None and existing.x_kind == "step" and name != LOSS_SERIES and name not in side:
                existing.append(step, t_s, value)  # fast path: a float for a series already recorded
                continue
            if name in side:
                self._enqueue({name: value}, step)
                continue
            number = self.checked(name, value, (name, step, t_s))
            if number is not None and name == LOSS_SERIES and not steps.user_loss:
                name = self._user_loss_name()  # the headline, or train_loss.emitted after captured points
            if number is not None:
                fresh.append((name, number))
        if fresh:
            registry.create([name for name, _ in fresh], side)
            for name, number in fresh:
                if name in side:
                    self._enqueue({name: number}, step)
                else:
                    registry.series[name].append(step, t_s, number)
        if now >= steps.next_report_s:
            self._report()

    def _user_loss_name(self) -> str:
        name, new = self._steps.user_loss_name()
        if new:
            note = (f"emitted from step {self._steps.steps} on, after the captured loss had points; train_loss keeps "
                    "the captured loss so that one series holds one quantity" if name == LATE_USER_LOSS else
                    "the cell's own loss; the loss passed to backward is not recorded")
            self._registry.describe(name, {"provenance": "measured", "source": "tm.emit(train_loss=...)", "note": note})
        return name

    def checked(self, name: Any, value: Any, key: Any, reader: ScalarReader | None = None) -> float | None:
        """``value`` as a float to record under ``name``, or ``None`` (warned once per name; docs/spec.md §18)."""
        refused = name in self._refused
        if refused or not self._registry.admit(name):  # refused by name: every later value of it too
            self.ignored += 1
            if not refused and len(self._refused) < MAX_REFUSED_NAMES and type(name) is str:
                self._refused.add(name)
            return None
        if type(value) is float:
            number: float | None = value
        else:
            try:
                number = (reader or self._steps.scalars).read(value, key)  # a TypeError for text
            except Exception as exc:  # TypeError, OverflowError, a __float__ that raises, ...
                return self._bad(name, exc)
            if number is None and getattr(value, "is_cpu", None) is False and not getattr(value, "is_cuda", False):
                return self._bad(name, f"a tensor on {getattr(value, 'device', '?')} has no sync-free read (pass a "
                                       "CPU or CUDA tensor or a float)")
        self._registry.count_new(name)
        return number

    def _bad(self, name: str, why: Any) -> None:
        """Count a value of ``name`` left out; the first of its name warns ``why``."""
        self.ignored += 1
        if name not in self._bad_said and len(self._bad_said) < MAX_REFUSED_NAMES:
            self._bad_said.add(name)
            self._warn_once(f"emit-{name}", f"tm.emit({printable(name)}=...) ignored: {printable(why)}")

    def _enqueue(self, values: dict[str, Any], step: int | None) -> None:
        """Queue values emitted off the recording thread (the emitting thread; O(1), bounded, never raises)."""
        queued = self._queued
        if len(queued) >= MAX_QUEUED:
            self.dropped += 1
            if not self._full_said:  # said once; every later drop is a count
                self._full_said = True
                self._warn_once("emit-queue", f"tm.emit from other threads: more than {MAX_QUEUED:,} values waiting "
                                              "to be recorded; later ones are counted and dropped (emits_dropped)")
            return
        queued.append((dict(values), self._steps.steps if step is None else step))
        if self._folder is None and not self._folder_stop.is_set():
            with self._folder_lock:  # once per run
                if self._folder is None:
                    self._folder = OurThread(target=self._fold_loop, name="trainmeter-emits")
                    self._folder.start()

    def _fold_loop(self) -> None:
        """The folding thread: a bounded fold per wake until the run ends (never raises)."""
        stop = self._folder_stop
        while not stop.wait(FOLD_WAKE_S):
            try:
                self._fold(FOLD_PER_WAKE)
            except Exception as exc:
                self._warn_once("emit-fold", f"tm.emit from other threads: folding failed and stopped: {exc!r}")
                return

    def _fold(self, limit: int | None) -> int:
        """Record up to ``limit`` queued values (``None``: all), stamped now; how many were taken."""
        steps = self._steps
        t_s = steps.now() - steps.t0_s
        registry = self._registry
        queued = self._queued
        side = self._side_names
        taken = 0
        for (name, step, at_s), number in self._fold_reader.poll():  # type: ignore[misc]
            registry.get(name).append(step, at_s, number)
        while queued and (limit is None or taken < limit):
            try:
                values, step = queued.popleft()
            except IndexError:
                break
            taken += 1
            for name, value in values.items():
                if name not in side:
                    with registry.lock:  # the recording thread may be creating it now
                        owned = name in registry.series
                        if not owned:
                            side.add(name)  # before the series is published: the recording thread diverts
                    if owned:
                        if len(self._to_owner) < MAX_QUEUED:
                            self._to_owner.append((name, value, step))
                        else:
                            self.dropped += 1
                        continue
                number = self.checked(name, value, (name, step, t_s), self._fold_reader)
                if number is not None:
                    registry.get(name).append(step, t_s, number)
        return taken

    def drain_owner(self, limit: int | None = OWNER_DRAIN) -> None:
        """Record values of series the recording thread writes (that thread's report, or the final one)."""
        pending = self._to_owner
        steps = self._steps
        t_s = steps.now() - steps.t0_s
        for _ in range(len(pending) if limit is None else min(limit, len(pending))):
            name, value, step = pending.popleft()
            number = self.checked(name, value, (name, step, t_s))
            if number is not None:
                self._registry.get(name).append(step, t_s, number)

    def close(self) -> None:
        """At the run's end: stop the folding thread, then record everything still queued (the finishing thread)."""
        self._folder_stop.set()
        folder = self._folder
        if folder is not None and folder is not threading.current_thread():
            folder.join(STOP_WAIT_S)
            if folder.is_alive():
                return
        self._fold(None)
        self.drain_owner(None)
