"""``tm.emit`` from other threads: queued in O(1) by the emitter, folded into series by a thread of ours (docs/spec.md §18).

The emitting thread appends its values to one bounded deque (no lock; over ``MAX_QUEUED``
waiting, later values are counted and dropped with one warning). The ``trainmeter-emits``
thread wakes every ``FOLD_WAKE_S`` and folds at most ``FOLD_PER_WAKE`` values: checked, stamped
then (one folding thread: no backwards times) and appended to series it is the only writer of.
A name the recording thread had already written itself stays that thread's: those values wait in
a second bounded deque for its next report (at most ``OWNER_DRAIN`` per report). No training thread
folds anything; the final report folds what is left once the thread has stopped.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from trainmeter.core.hot_state import HotState
from trainmeter.core.scalars import ScalarReader

MAX_QUEUED = 100_000
FOLD_WAKE_S = 0.05
FOLD_PER_WAKE = 1_000
OWNER_DRAIN = 10_000
STOP_WAIT_S = 0.5


class SideEmits:
    """The queue and folding thread of values emitted off the recording thread (a part of the monitor)."""

    hot: HotState  # hot.queued: the emitters' deque
    series: dict[str, Any]

    def _new_side_emits(self) -> None:
        """No folding thread and nothing folded (a new run, a forked child: the parent's thread is not here)."""
        self._side_names: set[str] = set()  # series the folding thread writes (it alone)
        self._to_owner: deque[tuple[str, Any, int]] = deque()  # values for series the recording thread writes
        self._folder: threading.Thread | None = None
        self._folder_lock = threading.Lock()
        self._folder_stop = threading.Event()
        self._fold_reader = ScalarReader()  # the folding thread's deferred reads (CUDA values)
        self.queue_dropped = 0

    def _enqueue(self, series: dict[str, Any], step: int | None) -> None:
        """Queue values emitted off the recording thread (the emitting thread; O(1), bounded, never raises)."""
        queued = self.hot.queued
        if len(queued) >= MAX_QUEUED:
            self.queue_dropped += 1
            self.warn_once("emit-queue", f"tm.emit from other threads: more than {MAX_QUEUED:,} values waiting to be "
                                         "recorded; later ones are counted and dropped (emits_dropped)")
            return
        queued.append((dict(series), self.hot.steps if step is None else step))
        if self._folder is None and not self._finished:
            self._start_folder()

    def _start_folder(self) -> None:
        with self._folder_lock:  # once per run
            if self._folder is not None:
                return
            self._folder = threading.Thread(target=self._fold_loop, name="trainmeter-emits", daemon=True)
            self._folder.start()

    def _fold_loop(self) -> None:
        """The folding thread: a bounded fold per wake until the run ends (never raises)."""
        stop = self._folder_stop
        while not stop.wait(FOLD_WAKE_S):
            try:
                self._fold(FOLD_PER_WAKE)
            except Exception as exc:
                self.warn_once("emit-fold", f"tm.emit from other threads: folding failed and stopped: {exc!r}")
                return

    def _fold(self, limit: int | None) -> int:
        """Record up to ``limit`` queued values (all with ``None``), stamped now; returns how many were taken.

        The folding thread, or the finishing thread once that thread has stopped.
        """
        t_s = self._now() - self.hot.t0_s
        queued = self.hot.queued
        side = self._side_names
        taken = 0
        for key, value in self._fold_reader.poll():
            name, step, at_s = key  # type: ignore[misc]
            self._series(name).append(step, at_s, value)
        while queued and (limit is None or taken < limit):
            try:
                values, step = queued.popleft()
            except IndexError:
                break
            taken += 1
            for name, value in values.items():
                if name not in side:
                    with self._series_lock:  # the recording thread may be creating it now
                        owned = name in self.series
                        if not owned:
                            side.add(name)  # before the series is published: the recording thread diverts
                    if owned:
                        if len(self._to_owner) < MAX_QUEUED:
                            self._to_owner.append((name, value, step))
                        else:
                            self.queue_dropped += 1
                        continue
                number = self._checked(name, value, (name, step, t_s), self._fold_reader)
                if number is not None:
                    (self.series.get(name) or self._series(name)).append(step, t_s, number)
        return taken

    def _drain_owner(self, limit: int | None) -> None:
        """Record values of series the recording thread writes (that thread's report, or the final one)."""
        t_s = self._now() - self.hot.t0_s
        pending = self._to_owner
        for _ in range(len(pending) if limit is None else min(limit, len(pending))):
            name, value, step = pending.popleft()
            number = self._checked(name, value, (name, step, t_s))
            if number is not None:
                (self.series.get(name) or self._series(name)).append(step, t_s, number)

    def _stop_folder(self) -> bool:
        """Stop the folding thread; whether it has ended (so the caller may fold what is left)."""
        self._folder_stop.set()
        folder = self._folder
        if folder is None or folder is threading.current_thread():
            return True
        folder.join(STOP_WAIT_S)
        return not folder.is_alive()

    def _drain_queue(self) -> None:
        """At the run's end: everything still queued, on the finishing thread (the folding thread stopped)."""
        if self._stop_folder():
            self._fold(None)
            self._drain_owner(None)
