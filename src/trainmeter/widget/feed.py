"""The publisher's reading side: a run's new points into one decimator per series, and the frames cut from them.

:meth:`SeriesFeed.read` moves what the monitor recorded since the last read (its own reader
cursor, ``monitor.add_reader()``: advancing it lets the monitor trim) into
:class:`~trainmeter.widget.decimate.Decimator` s, adds the smoothed twin of the training loss
(widget/smoothed.py, every step folded), the x mappings (widget/x_axis.py) and one point of each
report series per report; :meth:`SeriesFeed.sample_recent` adds the once-a-second recent rate.
The decimators own the retention: the front end keeps what it is sent. Publisher thread only.
"""

from __future__ import annotations

import math
from typing import Any

from trainmeter.widget.decimate import Decimator, share_budget
from trainmeter.widget.frame import SeriesColumns, encode_frame
from trainmeter.widget.live_rate import RecentFigures, RecentRate, RssReader
from trainmeter.widget.smoothed import LossSmoother
from trainmeter.widget.view_model import RECENT_SERIES, report_points
from trainmeter.widget.x_axis import AXIS_BUDGET_POINTS, AXIS_EVERY_S, AXIS_TIME, AXIS_TOKENS

_FAR = 1 << 62


class SeriesFeed:
    """One monitor's series, decimated, and the frames of them.

    Args:
        monitor: The run's :class:`~trainmeter.core.monitor.Monitor` (read-only here).
        budget_points: Points kept per series (decimated).
        history_points_total: Cap on points in a full frame across all series, shared by water-filling.
    """

    def __init__(self, monitor: Any, *, budget_points: int, history_points_total: int) -> None:
        self.monitor = monitor
        self.budget_points = budget_points
        self.history_points_total = history_points_total
        self.decimators: dict[str, Decimator] = {}
        self.cursor: dict[str, int] = monitor.add_reader()
        self.seq = 0
        self.rebucketed = False
        self.recent: RecentFigures | None = None
        self.x_head: tuple[int, int, float] | None = None
        self._reports_seen = 0
        self._recent = RecentRate()
        self._rss = RssReader()
        self._tokens_total = 0
        self._axis_t_s = -math.inf
        self._smoother = LossSmoother()

    def read(self) -> bool:
        """Move new points from the monitor into the decimators; returns whether any came."""
        m = self.monitor
        fresh = False
        for name, series in list(m.series.items()):
            end, steps, times, values = series.read(self.cursor.get(name, 0))
            self.cursor[name] = end
            if values:
                xs = steps if series.x_kind == "step" else times
                fresh |= self.extend(name, series.x_kind, xs, values)
                twin = self._smoother.twin(name, values)
                if twin is not None:
                    self.extend(twin[0], series.x_kind, xs, twin[1])
        step_series = m.step_series
        end, steps, times, tokens = step_series.read(self.cursor.get(step_series.name, 0))
        self.cursor[step_series.name] = end  # not drawn: read for the recent rate, then let the monitor trim it
        self._recent.extend(times, tokens)
        if steps and times:  # the x mappings (widget/x_axis.py): the head always, a point once a second
            self._tokens_total += int(sum(tokens))
            self.x_head = (steps[-1], self._tokens_total, float(times[-1]))
            if float(times[-1]) - self._axis_t_s >= AXIS_EVERY_S:
                self._axis_t_s = float(times[-1])
                self.extend(AXIS_TOKENS, "step", [steps[-1]], [float(self._tokens_total)], AXIS_BUDGET_POINTS)
                self.extend(AXIS_TIME, "step", [steps[-1]], [float(times[-1])], AXIS_BUDGET_POINTS)
        reports = m.reports
        if reports != self._reports_seen:
            self._reports_seen = reports
            session = m.session
            t_s = session.elapsed_s if session is not None else m.elapsed_s()
            for name, value in report_points(m.interval, session, m.memory).items():
                if name not in m.series:
                    fresh |= self.extend(name, "time", [t_s], [value])
        return fresh

    def sample_recent(self) -> bool:
        """Take the once-a-second figures (recent rate, RSS); returns whether a chart point was added."""
        previous = self.recent
        try:
            m = self.monitor
            self._recent.note_clock(m.elapsed_s(), float(m.phases.totals_now().get("train", 0.0)))
        except (RuntimeError, TypeError, AttributeError):  # the training thread changed the phases mid-read
            pass
        self.recent = self._recent.figures(rss_bytes=self._rss.read())
        if self.recent is None or (previous is not None and self.recent.t_s <= previous.t_s):
            return False
        return self.extend(RECENT_SERIES, "time", [self.recent.t_s], [self.recent.tokens_per_s])

    def extend(self, name: str, x_kind: str, xs: list[Any], ys: list[float], budget_points: int | None = None
               ) -> bool:
        """Add points to series ``name`` (its decimator is made on first use); returns ``True``."""
        d = self.decimators.get(name)
        if d is None:
            d = self.decimators[name] = Decimator(name, x_kind, budget_points=budget_points or self.budget_points)
        if d.extend(xs, ys):
            self.rebucketed = True
        return True

    def stop_reading(self) -> None:
        """Move every cursor past the end, so the monitor trims as if this reader had read everything."""
        for name in list(self.cursor):
            self.cursor[name] = _FAR
        for series in list(self.monitor.series):
            self.cursor[series] = _FAR

    @property
    def pending(self) -> bool:
        """Whether some decimator holds points no frame has carried yet."""
        return any(d.pending for d in self.decimators.values())

    # -- frames ----------------------------------------------------------------------------------
    def series_columns(self, *, include_open: bool, max_points: int | None = None) -> list[SeriesColumns]:
        """Every series' decimated history (for frames and the HTML snapshot)."""
        decimators = list(self.decimators.values())
        # each series' JSON header entry (name, kind, length) costs about three points of 16 bytes:
        # keep the frame in budget
        total = max(2 * len(decimators), self.history_points_total - 3 * len(decimators))
        caps = share_budget({d.name: d.points for d in decimators}, total, self.budget_points)
        out = []
        for d in decimators:
            xs, ys = d.columns(include_open=include_open, max_points=max_points or caps[d.name])
            out.append(SeriesColumns(name=d.name, x_kind=d.x_kind, xs=xs, ys=ys))  # type: ignore[arg-type]
        return out

    def full_frame(self, *, include_open: bool) -> bytes:
        """A frame of the whole history (``snapshot`` or ``history``); every point counts as sent."""
        columns = self.series_columns(include_open=include_open)
        for d in self.decimators.values():
            d.mark_all_taken()
        self.seq += 1
        return encode_frame(self.seq, columns)

    def append_frame(self) -> bytes:
        """A frame of the points no frame carried yet (``append``)."""
        columns = []
        for d in self.decimators.values():
            if d.pending:
                xs, ys = d.take_new()
                columns.append(SeriesColumns(name=d.name, x_kind=d.x_kind, xs=xs, ys=ys))  # type: ignore[arg-type]
        self.seq += 1
        return encode_frame(self.seq, columns)
