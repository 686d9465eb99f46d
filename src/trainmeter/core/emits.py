"""Emitted values: checked one by one, recorded on the recording thread; from others see core/side_emits.py."""

from __future__ import annotations

import re
import threading
from typing import Any

from trainmeter.core.hot_state import HotState
from trainmeter.core.loss_order import LOSS_SERIES
from trainmeter.core.scalars import StepLoss
from trainmeter.core.series import Series
from trainmeter.core.side_emits import MAX_QUEUED
from trainmeter.core.text import printable

MAX_DROPPED_NAMES = 20
DEFAULT_MAX_SERIES = 256
RESERVED_SERIES = ("tokens_per_step",)
_RESERVED_NAME = re.compile(r"(node|gpu\d+)\.|__")


class Emits:
    """``tm.emit``, samplers' points and the series registry (a part of :class:`~trainmeter.core.monitor.Monitor`)."""

    series: dict[str, Series]
    hot: HotState  # the cross-thread queue, the step, the clock mark

    def record(self, series: dict[str, Any], step: int | None = None) -> None:
        """Record named scalars at ``step`` (default: the current step) (``tm.emit``, taps).

        Each value is checked on its own: good ones are recorded, each bad one
        (not a number, too big for a float, a ``__float__`` that raises, a
        tensor with no sync-free read, a reserved or over-the-cap name) is left
        out with one warning. Off the recording thread (the one that started
        the run) values are queued in O(1) and recorded by trainmeter's folding
        thread (core/side_emits.py; at most ``MAX_QUEUED`` waiting, more are
        counted and dropped with a warning). Any thread; never raises.
        """
        if threading.get_ident() != self._owner_ident:
            self._enqueue(series, step)
            return
        hot = self.hot
        now = hot.now()
        t_s = now - hot.t0_s
        if step is None:
            step = hot.steps
        known = self.series
        side = self._side_names  # series the folding thread writes: this thread's values for them go there too
        fresh: list[tuple[str, float]] = []  # values of names without a series yet: created in one copy below
        for name, value in series.items():
            existing = known.get(name) if type(value) is float else None
            if existing is not None and existing.x_kind == "step" and name != LOSS_SERIES and name not in side:
                existing.append(step, t_s, value)  # fast path: a float for a series already recorded
                continue
            if name in side:
                self._enqueue({name: value}, step)
                continue
            number = self._checked(name, value, (name, step, t_s))
            if number is not None and name == LOSS_SERIES and not hot.user_loss:
                name = self._user_loss_name()  # the headline, or train_loss.emitted after captured points
            if number is not None:
                fresh.append((name, number))
        if fresh:
            self._record_fresh(fresh, step, t_s)
        if now >= hot.next_report_s:
            self._maybe_report()

    def _record_fresh(self, fresh: list[tuple[str, float]], step: int, t_s: float) -> None:
        """Create the series of one ``record`` call's new names with one copy of the registry, then append.

        Readers iterate a registry dict that never changes size, so a new name publishes a grown copy; one
        copy per call (not per name) keeps ``tm.emit(**many_new_names)`` linear.
        """
        side = self._side_names
        with self._series_lock:  # the folding thread may be taking a name now: one of us creates it
            grown: dict[str, Series] | None = None
            for name, _ in fresh:
                if name not in side and name not in self.series and (grown is None or name not in grown):
                    if grown is None:
                        grown = dict(self.series)
                    grown[name] = Series(name)
            if grown is not None:
                self.series = grown
        for name, number in fresh:
            if name in side:
                self._enqueue({name: number}, step)
            else:
                self.series[name].append(step, t_s, number)

    def _checked(self, name: Any, value: Any, key: Any, reader: Any = None) -> float | None:
        """``value`` as a float to record under ``name``, or ``None`` (warned once per name and fault)."""
        existing = self.series.get(name) if type(name) is str else None
        if existing is None:
            if not isinstance(name, str) or name in RESERVED_SERIES or _RESERVED_NAME.match(name):
                self.warn_once(f"emit-reserved-{name}",
                               f"tm.emit({printable(name)}=...) ignored: the name is reserved for trainmeter's own "
                               "series (tokens_per_step, node.*, gpu<N>.*, __*)")
                return None
            if self._user_series >= self._max_series:
                self._drop_series(name)
                return None
        elif existing.x_kind != "step":
            self.warn_once(f"emit-reserved-{name}", f"tm.emit({printable(name)}=...) ignored: a background "
                                                    "sampler owns that series")
            return None
        if type(value) is float:
            number: float | None = value
        else:
            try:
                if isinstance(value, (str, bytes)):
                    raise TypeError(f"expected a float or a 0-d tensor, got {type(value).__name__}")
                number = (reader or self.hot.scalars).read(value, key)
            except Exception as exc:  # TypeError, OverflowError, a __float__ that raises, ...
                self.warn_once(f"emit-{name}", f"tm.emit({printable(name)}=...) ignored: {printable(exc)}")
                return None
            if number is None and getattr(value, "is_cpu", None) is False and not getattr(value, "is_cuda", False):
                device = getattr(value, "device", "?")
                self.warn_once(f"emit-{name}", f"tm.emit({printable(name)}=...) ignored: a tensor on {device} has "
                                               "no sync-free read (pass a CPU or CUDA tensor or a float)")
                return None
        if existing is None:
            self._user_series += 1
        return number

    def _drop_series(self, name: str) -> None:
        """Count a name past the cap once (names, not emits; the set of names seen is itself capped)."""
        if name in self._dropped_seen:
            return
        if len(self._dropped_seen) < MAX_QUEUED:
            self._dropped_seen.add(name)
        self.series_dropped += 1
        if len(self.series_dropped_names) < MAX_DROPPED_NAMES:
            self.series_dropped_names.append(printable(name)[:80])
        self.warn_once("series-cap", f"more than {self._max_series} series (max_series): {printable(name)[:80]!s} "
                                     "and later new names are not recorded; the passport lists them")

    def record_at(self, name: str, t_s: float, value: float, *, x_kind: str = "time") -> None:
        """Record one point of a series owned by a background sampler.

        Each series must have a single writing thread; samplers use their own
        names (``gpu0.util``, ``node.cpu``). ``t_s`` is seconds since the run began.
        """
        self._series(name, x_kind).append(self.hot.steps, t_s, float(value))


    def _poll_scalars(self, t_s: float) -> None:
        for key, value in self.hot.scalars.poll():
            name, step, at_s = key  # type: ignore[misc]
            if type(name) is StepLoss:
                name.resolve(step, at_s, value)  # (step loss, part index, field)
            else:
                self._series(name).append(step, at_s, value)

    def _series(self, name: str, x_kind: str = "step") -> Series:
        series = self.series.get(name)
        if series is None:
            with self._series_lock:  # samplers create series from their own threads
                series = self.series.get(name)
                if series is None:
                    grown = dict(self.series)
                    series = grown[name] = Series(name, x_kind)
                    self.series = grown  # readers iterate a dict that never changes size
        return series

