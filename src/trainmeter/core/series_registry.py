"""The run's series by name, their provenance, their readers' cursors, decimated views and the cap on new names.

Readers iterate a dict that never changes size (a new name publishes a grown copy). A reader's cursor holds back
trimming, to at most ``MAX_PENDING`` points per series; a reader with a ``drain`` takes its points between reports
once a series holds ``DRAIN_POINTS`` (docs/spec.md section 18).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from trainmeter.core.series import Series, StepSeries
from trainmeter.core.series_views import SeriesViews
from trainmeter.core.text import printable

MAX_DROPPED_NAMES = 20
MAX_SEEN_NAMES = 100_000
DEFAULT_MAX_SERIES = 256
MAX_PENDING = 100_000
DRAIN_POINTS = 32_768  # points past the slowest reader before the drains are asked
DRAIN_CHECK_STEPS = 4_096  # steps between two looks at the points held (an at_step callback)
RESERVED_SERIES = ("tokens_per_step",)
_RESERVED_NAME = re.compile(r"(node|gpu\d+)\.|__")


class SeriesRegistry:
    """Named series, their ``info``, readers, ``views`` and the cap ``max_series``. Any thread; appends: each writer."""

    def __init__(self, warn_once: Callable[[str, str], None], max_series: int,
                 step_series: Callable[[], StepSeries]) -> None:
        self._warn_once = warn_once
        self.max_series = max_series
        self._step_series = step_series  # the step rule's tokens per step (core/steps.py), read with every series
        self.views = SeriesViews(lambda: self.series, self.add_reader)
        self.new_run()

    def new_run(self) -> None:
        """No series, no entries, no readers (construction; a forked child's own run)."""
        self.series: dict[str, Series] = {}
        self.info: dict[str, dict[str, Any]] = {}  # series name -> its source and provenance
        self.lock = threading.Lock()
        self._readers: list[tuple[dict[str, int], Callable[[str], bool] | None]] = []
        self._drains: list[Callable[[dict[str, int]], None]] = []
        self._watch: tuple[Callable[[int, Callable[[], None]], None], Callable[[], int],
                           Callable[[Callable[[], None]], None]] | None = None
        self._user_series = 0
        self.origin = 0  # the step this run's axis starts from (set_origin)
        self.dropped = 0
        self.dropped_names: list[str] = []
        self._dropped_seen: set[str] = set()
        self.views.new_run()

    def get(self, name: str, x_kind: str = "step") -> Series:
        """The series ``name``, made (with ``x_kind``) if new. Any thread."""
        if name not in self.series:
            self.create([name], x_kind=x_kind)
        return self.series[name]

    def create(self, names: list[str], skip: set[str] | frozenset[str] = frozenset(), x_kind: str = "step") -> None:
        """Make the series of ``names`` not yet known (but ``skip``) with one copy of the registry."""
        with self.lock:
            new = [name for name in dict.fromkeys(names) if name not in skip and name not in self.series]
            if new:
                self.series = {**self.series, **{name: Series(name, x_kind, self.origin) for name in new}}

    def set_origin(self, steps: int) -> None:
        """Every series is read ``steps`` further along the step axis from now on (docs/spec.md section 22)."""
        with self.lock:
            self.origin = steps
            for series in self._all():
                series.origin = steps

    def describe(self, name: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        """Set ``series_info[name]`` (``replace=False``: only if it has none)."""
        (self.info.__setitem__ if replace else self.info.setdefault)(name, entry)

    def admit(self, name: Any) -> bool:
        """Whether a value of the user's may go to series ``name`` (not reserved, not past the cap; warned once)."""
        existing = self.series.get(name) if type(name) is str else None
        if existing is None:
            if not isinstance(name, str) or name in RESERVED_SERIES or _RESERVED_NAME.match(name):
                self._warn_once(f"emit-reserved-{name}",
                                f"tm.emit({printable(name)}=...) ignored: the name is reserved for trainmeter's own "
                                "series (tokens_per_step, node.*, gpu<N>.*, __*)")
                return False
            if self._user_series >= self.max_series:
                self._drop(name)
                return False
        elif existing.x_kind != "step":
            self._warn_once(f"emit-reserved-{name}", f"tm.emit({printable(name)}=...) ignored: a background "
                                                     "sampler owns that series")
            return False
        return True

    def count_new(self, name: str) -> None:
        """A value of the user's for a name not yet known was read: it counts against the cap."""
        if name not in self.series:
            self._user_series += 1

    def _drop(self, name: str) -> None:
        """Count a name past the cap once (names, not emits; the set of names seen is itself capped)."""
        if name in self._dropped_seen:
            return
        if len(self._dropped_seen) < MAX_SEEN_NAMES:
            self._dropped_seen.add(name)
        self.dropped += 1
        if len(self.dropped_names) < MAX_DROPPED_NAMES:
            self.dropped_names.append(printable(name)[:80])
        self._warn_once("series-cap", f"more than {self.max_series} series (max_series): {printable(name)[:80]!s} "
                                      "and later new names are not recorded; the passport lists them")

    def add_reader(self, drain: Callable[[dict[str, int]], None] | None = None, *,
                   reads: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Register a series reader; its cursor map (name -> position). ``drain(ends)``: its points between reports
        (the report worker); ``reads(name)``: whether it holds back that series (``None``: all)."""
        cursor: dict[str, int] = {}
        self._readers.append((cursor, reads))
        if drain is not None:
            self._drains.append(drain)
        return cursor

    def watch(self, at_step: Callable[[int, Callable[[], None]], None], steps: Callable[[], int],
              submit: Callable[[Callable[[], None]], None]) -> None:
        """Every ``DRAIN_CHECK_STEPS`` steps, ``submit`` a drain when a series holds more than ``DRAIN_POINTS``."""
        self._watch = (at_step, steps, submit)
        at_step(steps() + DRAIN_CHECK_STEPS, self._look)

    def _slowest(self, series: Series | StepSeries) -> int:
        """The position of the slowest reader of ``series`` (its end when none reads it)."""
        name = series.name
        return min((c.get(name, 0) for c, reads in self._readers if reads is None or reads(name)), default=series.end)

    def _all(self) -> tuple[Series | StepSeries, ...]:
        return (self._step_series(), *self.series.values())

    def held(self) -> int:
        """Most points any series holds past its slowest reader (0 without readers). Any thread."""
        return max(s.end - self._slowest(s) for s in self._all()) if self._readers else 0

    def _look(self) -> None:
        """The training thread, every ``DRAIN_CHECK_STEPS`` steps: queue a drain when the points held are many."""
        watch = self._watch
        if watch is None:
            return
        at_step, steps, submit = watch
        at_step(steps() + DRAIN_CHECK_STEPS, self._look)
        if self._drains and self.held() > DRAIN_POINTS:
            ends = {s.name: s.end for s in self._all()}
            submit(lambda: self._drain(ends))

    def _drain(self, ends: dict[str, int]) -> None:
        """Each draining reader takes its points up to ``ends``; then trim (the report worker)."""
        for drain in list(self._drains):
            drain(ends)
        self.trim()

    def stop_watching(self) -> None:
        """No more drains (the run's end)."""
        self._watch = None

    def trim(self) -> None:
        """Drop points every reader has seen; keep at most ``MAX_PENDING`` per series."""
        for series in self._all() if self._readers else ():
            series.trim(max(self._slowest(series), series.end - MAX_PENDING))

    def locks(self) -> list[threading.Lock]:
        """The registry's lock, the views' and each series' (held around a fork: docs/spec.md section 19)."""
        return [self.lock, self.views.lock, *(s.lock for s in self._all())]
