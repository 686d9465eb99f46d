"""The publisher's reading side: the run's decimated views (core/series_views.py, every series with the loss's
smoothed twin) plus the report series, the recent rate and the x map (its own cursor on the step series), and the
frames cut from them: each point goes out once, at most :data:`MAX_SERIES_SENT` series a frame (docs/protocol.md
section 2, "Series"; docs/spec.md section 18, "bounds at any cap"). The feed's own state: publisher thread only; the
decimators under the views' lock (the report worker catches them up too).
"""

from __future__ import annotations

import json
import math
from contextlib import suppress
from typing import Any

from trainmeter.core.decimate import Decimator, share_budget
from trainmeter.widget.facts import report_points
from trainmeter.widget.frame import SeriesColumns, encode_frame
from trainmeter.widget.live_rate import RecentFigures, RecentRate, RssReader
from trainmeter.widget.view_model import RECENT_SERIES, RECENT_TRAIN_SERIES
from trainmeter.widget.x_axis import X_MODES, XMAP_EVERY_S, XMap

_FAR = 1 << 62
POINT_BYTES = 8 * (len(X_MODES) + 1)
"""Bytes of one point in a frame: a float64 per x axis (widget/x_axis.py) and the y."""
MAX_SERIES_SENT = 400
"""Most series one frame carries (each costs a header entry and at least two points of the history)."""
STREAM_POINTS_PER_S = 50
"""Most points per second the live stream carries per series (about): a faster series is decimated coarser from the
start (``Decimator.coarsen``), so a fast run's first minute sends no more than a later one."""
REPLACE_FACTOR = 3
HISTORY_POINTS_TOTAL = 6000  # most points of a full frame, live or replayed (a saved notebook stays small)
"""A series whose front-end copy passed this many times its budget is replaced by its decimated history."""


def shown_series(state: dict[str, Any]) -> tuple[str, ...]:
    """The series the state's charts draw (and their smoothed twins), in chart order."""
    charts = [c for c in state.get("charts") or () if isinstance(c, dict)]
    return tuple(dict.fromkeys(str(n) for c in charts for n in (*(c.get("series") or ()),
                                                                 *(c.get("smoothed") or {}).values())))


def header_points(name: str) -> int:
    """What a series' JSON header entry (``{"name", "x", "n", "axes": [...]}``) costs in a frame, in points."""
    return -(-(len(json.dumps(name)) + 72) // POINT_BYTES)


def pick_sent(decimators: dict[str, Decimator], shown: tuple[str, ...] = (),
              points_total: int | None = None) -> list[Decimator]:
    """The decimators a frame carries, in their own order: all when they are at most :data:`MAX_SERIES_SENT` and their
    headers (with two points each) fit in half of ``points_total``; else the recent rate, ``shown``, then the oldest,
    to a bound."""
    room = None if points_total is None else points_total // 2
    picked: set[str] = set()
    spent = 0
    for name in (RECENT_SERIES, *shown, *decimators):
        if name in picked or name not in decimators:
            continue
        price = header_points(name) + 2
        if len(picked) >= MAX_SERIES_SENT or (room is not None and picked and spent + price > room):
            break
        picked.add(name)
        spent += price
    return [d for name, d in decimators.items() if name in picked]


class SeriesFeed:
    """One monitor's (a :class:`~trainmeter.core.context.RunContext`) series, decimated to ``budget_points`` each,
    and the frames of them (a full frame holds at most :data:`HISTORY_POINTS_TOTAL`, shared by water-filling)."""

    def __init__(self, monitor: Any, *, budget_points: int) -> None:
        self.monitor = monitor
        self.views = monitor.series_views
        self.decimators: dict[str, Decimator] = self.views.decimators  # one per series; read under ``views.lock``
        self.views.subscribe("widget", budget_points=budget_points)  # the loss's twin: the optim wing's fold
        step_name = monitor.step_series.name
        self.cursor: dict[str, int] = monitor.add_reader(reads=lambda name: name == step_name)
        self.seq = 0
        self.recent: RecentFigures | None = None
        self.x_map = XMap(open_end=True)
        """Step -> tokens, seconds: every frame's points go out mapped onto each axis (widget/x_axis.py)."""
        self._reports_seen = 0
        self._recent = RecentRate()
        self._rss = RssReader()
        self._tokens_total = 0
        self._axis_t_s = -math.inf
        self.shown: tuple[str, ...] = ()
        """The series the last state's charts draw (:func:`shown_series`): sent first past the series cap."""
        self.held: dict[str, int] = {}
        """Points the front end holds per series (what frames sent since its last full copy)."""
        self._first_read_s: float | None = None

    def read(self, now_s: float | None = None) -> bool:
        """Move new points from the monitor into the decimators; returns whether any came. ``now_s`` (the publisher's
        clock): the series faster than :data:`STREAM_POINTS_PER_S` since the first read are coarsened to it."""
        m = self.monitor
        fresh = self.views.catch_up()
        step_series = m.step_series
        end, steps, times, tokens = step_series.read(self.cursor.get(step_series.name, 0))
        self.cursor[step_series.name] = end  # not drawn: read for the recent rate, then let the monitor trim it
        self._recent.extend(times, tokens)
        if steps and times:  # the x map (widget/x_axis.py): the head always, a point once a second
            if self.x_map.empty:  # from the step the run's axis starts at (a resumed run's: docs/spec.md section 22)
                self.x_map.steps[0] = float(m.step_origin)
            self._tokens_total += int(sum(tokens))
            if float(times[-1]) - self._axis_t_s >= XMAP_EVERY_S:
                self._axis_t_s = float(times[-1])
                self.x_map.add(steps[-1], self._tokens_total, float(times[-1]))
            else:
                self.x_map.set_head(steps[-1], self._tokens_total, float(times[-1]))
        reports = m.reports
        if reports != self._reports_seen:
            self._reports_seen = reports
            session = m.session
            t_s = session.elapsed_s if session is not None else m.elapsed_s()
            for name, value in report_points(m.interval, session, m.memory).items():
                if name not in m.series:
                    fresh |= self.views.extend(name, "time", [t_s], [value])
        if now_s is None:
            return fresh
        if self._first_read_s is None:
            self._first_read_s = now_s
        seconds = max(1.0, now_s - self._first_read_s)
        with self.views.lock:  # a series faster than the stream carries (two points a bucket) is coarsened
            for d in self.decimators.values():
                per_s = d.count / seconds
                if 2 * per_s / d.width > STREAM_POINTS_PER_S:
                    d.coarsen(2 * per_s / STREAM_POINTS_PER_S)
        return fresh

    def sample_recent(self) -> bool:
        """Take the once-a-second figures (recent rate, RSS); returns whether a chart point was added."""
        previous = self.recent
        now_s = None
        with suppress(RuntimeError, TypeError, AttributeError):  # the training thread changed the phases mid-read
            now_s = self.monitor.elapsed_s()
            self._recent.note_clock(now_s, float(self.monitor.phases.totals_now().get("train", 0.0)))
        self.recent = self._recent.figures(rss_bytes=self._rss.read(), now_s=now_s)
        if self.recent is None or (previous is not None and self.recent.t_s <= previous.t_s):
            return False
        r = self.recent
        if r.train_tokens_per_s is not None:  # over the same window: never below the session rate
            self.views.extend(RECENT_TRAIN_SERIES, "time", [r.t_s], [r.train_tokens_per_s])
        return self.views.extend(RECENT_SERIES, "time", [r.t_s], [r.tokens_per_s])

    def stop_reading(self) -> None:
        """Read no more, so the monitor trims as if this reader had read everything."""
        self.views.unsubscribe("widget")
        self.cursor[self.monitor.step_series.name] = _FAR

    def release(self) -> None:
        """The run ended and its final frames went out: drop the recent rate's window of steps (up to 10 s of them,
        kept while the publisher stays referenced: the last widget of the kernel); the figures stay."""
        self._recent = RecentRate(self._recent.window_s)

    @property
    def pending(self) -> bool:
        """Whether some decimator holds points no frame has carried yet."""
        with self.views.lock:
            return any(d.pending for d in self.decimators.values())

    # -- frames ----------------------------------------------------------------------------------
    def series_columns(self) -> list[SeriesColumns]:
        """Every series' decimated history, open buckets included, on its native x only (the HTML snapshot)."""
        with self.views.lock:
            return history_columns(self.decimators, None, self.shown, HISTORY_POINTS_TOTAL)

    def full_frame(self, *, include_open: bool) -> bytes:
        """A frame of the whole history (``snapshot`` or ``history``); every point counts as sent."""
        with self.views.lock:
            columns = history_columns(self.decimators, self.x_map, self.shown, HISTORY_POINTS_TOTAL,
                                      include_open=include_open)
            for d in self.decimators.values():
                d.mark_all_taken()
        self.held = {c.name: len(c.ys) for c in columns}
        self.seq += 1
        return encode_frame(self.seq, columns)

    def append_frame(self) -> tuple[bytes, list[str]] | None:
        """A frame of the points no frame carried yet and the series whose copy it replaces (``append``), or ``None``;
        a series whose front-end copy passed :data:`REPLACE_FACTOR` times its budget goes out whole."""
        columns, replaced = [], []
        with self.views.lock:
            sent = {d.name for d in pick_sent(self.decimators, self.shown, points_total=HISTORY_POINTS_TOTAL)}
            for d in self.decimators.values():
                held = self.held.get(d.name, 0)
                whole = held > REPLACE_FACTOR * d.budget_points
                if not (d.pending or whole):
                    continue
                if whole:
                    xs, ys = d.columns(include_open=False)
                    d.mark_all_taken()
                    held = 0
                else:
                    xs, ys = d.take_new()
                if d.name in sent and (xs or whole):  # past the series cap the others stay here (module docstring)
                    columns.append(_column(d, xs, ys, self.x_map))
                    self.held[d.name] = held + len(xs)
                    if whole:
                        replaced.append(d.name)
        if not columns:
            return None
        self.seq += 1
        return encode_frame(self.seq, columns), replaced


def _column(d: Decimator, xs: list[float], ys: list[float], x_map: XMap | None) -> SeriesColumns:
    return SeriesColumns(name=d.name, x_kind=d.x_kind, xs=xs, ys=ys,  # type: ignore[arg-type]
                         mapped=x_map.columns(d.x_kind, xs) if x_map is not None else {})


def history_columns(decimators: dict[str, Decimator], x_map: XMap | None, shown: tuple[str, ...] = (),
                    points_total: int | None = None, *, include_open: bool = True) -> list[SeriesColumns]:
    """The columns of the decimators a frame carries (:func:`pick_sent`), within ``points_total`` points (headers
    included), on every x axis of ``x_map`` (``None``: native x only)."""
    sent = pick_sent(decimators, shown, points_total=points_total)
    caps = {}
    if points_total is not None:  # points per series: the frame, headers included, within points_total
        headers = sum(header_points(d.name) for d in sent)
        caps = share_budget({d.name: d.points for d in sent}, max(2 * len(sent), points_total - headers))
    return [_column(d, *d.columns(include_open=include_open, max_points=caps.get(d.name)), x_map) for d in sent]
