"""``tm.display()``: show the live run's dashboard again, or replay a saved run (docs/spec.md section 12).

A replay is the static dashboard (state from the passport, history decimated from ``events.jsonl``) that a widget
model re-mounts live while the kernel lives; marimo gets the widget object; a script the text summary.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from trainmeter.core.decimate import DEFAULT_BUDGET_POINTS
from trainmeter.core.series_views import SeriesViews
from trainmeter.core.text import printable
from trainmeter.lineage.view import PARENT_LOSS, earlier_points, earlier_runs, step_origin
from trainmeter.optim.smoothing import SMOOTHED, LossEma
from trainmeter.record.events import LOG_FILE, ReadStats, Record, iter_events
from trainmeter.record.runs import REPLAY_MAX_BYTES, Run, damaged_passport, load
from trainmeter.record.safe_read import DASHBOARD_TYPES, read_json
from trainmeter.sizes import format_bytes
from trainmeter.widget.facts import SavedLog, facts_from_monitor, facts_from_run, report_points_from_record
from trainmeter.widget.feed import HISTORY_POINTS_TOTAL, history_columns
from trainmeter.widget.frame import SeriesColumns, encode_frame
from trainmeter.widget.host import in_marimo, ipython_shell, is_jupyter_shell, show_in_marimo
from trainmeter.widget.look import label_charts
from trainmeter.widget.view_model import DASHBOARD_FILE, LOSS_NAMES, build_state, summary_text
from trainmeter.widget.x_axis import XMap, report_mapping

MAX_REPLAYS_KEPT = 16
# replay widgets stay referenced (their front end draws into the static HTML's mount point)
_REPLAYS: deque[Any] = deque(maxlen=MAX_REPLAYS_KEPT)


class ReplayFeed:
    """Decimated columns of a saved run's series and report series, fed record by record (a replay, a followed run).

    Series records carry ``x`` (``step`` when absent); the report series and the x map (widget/x_axis.py) come from
    the ``interval`` records; the training loss's smoothed twin is folded over every step by the run's one rule
    (optim/smoothing.py). A view of its own (a saved run is not the live stream). One thread.
    """

    def __init__(self) -> None:
        self.views = SeriesViews()
        self.views.subscribe("replay", budget_points=DEFAULT_BUDGET_POINTS, twins=LossEma().twin)
        self.x_map = XMap()
        self._last_step = 0
        self._origin: int | None = None  # the step its axis starts from (docs/spec.md section 22)

    def take(self, e: Record) -> None:
        """Fold one run-log record."""
        kind = e.get("kind")
        if kind == "series":
            x_kind = e.get("x", "step")
            xs = e.get("step") if x_kind == "step" else [t / 1e6 for t in e.get("t_us") or []]
            if xs and e.get("value"):
                self.views.extend(str(e["name"]), x_kind, xs, [math.nan if y is None else y for y in e["value"]])
        elif kind == "steps" and self._origin is None:
            self._origin = step_origin(e)
            if self._origin and self.x_map.empty:  # a resumed run's map starts at its first step of the training
                self.x_map.steps[0] = float(self._origin)
        elif kind == "interval":
            t_s, values = report_points_from_record(e)
            for name, value in values.items():
                self.views.extend(name, "time", [t_s], [value])
            point = report_mapping(e, self._last_step)
            if point is not None:
                self._last_step, at_s, tokens = point
                self.x_map.add(self._last_step + (self._origin or 0), math.nan if tokens is None else tokens, at_s)

    def columns(self, shown: tuple[str, ...] = (), points_total: int | None = None) -> list[SeriesColumns]:
        """The series' columns (open buckets included; ``shown`` first within ``points_total`` points, headers
        included, when given), each on every x axis."""
        return history_columns(self.views.decimators, self.x_map, shown, points_total)


def replay(run_or_path: Run | str | Path) -> tuple[dict[str, Any], list[SeriesColumns], bytes]:
    """``(state, columns, history frame)`` of a saved run, its log streamed once (at most ``REPLAY_MAX_BYTES``). A
    damaged run replays as ``unfinished`` with the reason among its warnings; ``FileNotFoundError``: no run there."""
    run = run_or_path if isinstance(run_or_path, Run) else load(run_or_path)
    read = ReadStats()
    passport = dict(run.passport)
    try:
        log, feed = SavedLog(), ReplayFeed()
        for steps, values in earlier_points(earlier_runs(run.dir, (passport.get("lineage") or {}).get("runs"))):
            # a resumed run's earlier runs' training loss (docs/spec.md section 22)
            feed.views.extend(PARENT_LOSS, "step", steps, [math.nan if v is None else v for v in values])
        for e in log.watch(_log_records(run.dir, read)):
            feed.take(e)
        columns = feed.columns((*LOSS_NAMES, *SMOOTHED.values()), HISTORY_POINTS_TOTAL)  # the losses first
        if read.bytes_left_out:
            passport["warnings"] = [*list(passport.get("warnings") or []),
                                    f"its run log is longer than {format_bytes(REPLAY_MAX_BYTES)}: the last "
                                    f"{format_bytes(read.bytes_left_out)} are not replayed (Run.to_pandas reads all)"]
        try:
            saved = read_json(run.dir / DASHBOARD_FILE, types=DASHBOARD_TYPES)
        except OSError:  # missing or damaged (Damaged): the replay shows the passport's view
            saved = None
        state = with_live_extras(build_state(facts_from_run(_shown(passport), log, str(run.dir), feed.x_map)), saved)
    except Exception as exc:  # records of the wrong types: the run shows as damaged
        reason = f"its records could not be replayed ({type(exc).__name__}: {printable(exc)})"
        state = build_state(facts_from_run(_shown(damaged_passport(run.dir, reason)), [], run_dir=str(run.dir)))
        columns = []
    return state, columns, encode_frame(1, columns)


def _log_records(run_dir: Path, stats: ReadStats) -> Iterator[Record]:
    try:
        yield from iter_events(run_dir / LOG_FILE, stats=stats, max_bytes=REPLAY_MAX_BYTES)
    except OSError:  # missing, or not a regular file (Damaged: said by the run's passport)
        return


def _shown(passport: dict[str, Any]) -> dict[str, Any]:
    """A damaged run's passport as the widget shows it: ``unfinished``, the reason first among the warnings."""
    reason = passport.get("damaged")
    if not reason:
        return passport
    warnings = [w for w in passport.get("warnings") or [] if isinstance(w, str)]
    first = [] if any(str(reason) in w for w in warnings) else [f"damaged: {reason}"]
    return {**passport, "status": "unfinished", "warnings": first + warnings}


def with_live_extras(state: dict[str, Any], saved: dict[str, Any] | None) -> dict[str, Any]:
    """Add what the live view had and the passport lacks: panels, charts and tiles (by id) of ``dashboard.json``."""
    if not saved:
        return state
    out = dict(state)
    for key in ("tiles", "charts", "panels"):
        have = {item.get("id") for item in out.get(key) or [] if isinstance(item, dict)}
        extra = [item for item in saved.get(key) or [] if isinstance(item, dict) and item.get("id") not in have]
        out[key] = list(out.get(key) or []) + extra
    # a series an extension's chart draws (lr on its log axis) is not drawn a second time on its own
    charts = [c for c in out.get("charts") or [] if isinstance(c, dict)]
    owned = {n for c in charts if not str(c.get("id", "")).startswith("series:") for n in c.get("series") or ()}
    kept = []
    for c in charts:
        if str(c.get("id", "")).startswith("series:"):
            left = [n for n in c.get("series") or () if n not in owned]
            if not left:
                continue
            c = {**c, "series": left}
        kept.append(c)
    out["charts"] = label_charts(kept)
    return out


def display(run_or_path: Run | str | Path | None = None, *, follow: bool = False) -> None:
    """Show the live run's dashboard (no argument) or replay a saved run.

    Args:
        run_or_path: ``None`` for the run in progress (or the last one shown in this kernel); a
            :class:`~trainmeter.record.runs.Run`, a run folder, or its ``passport.json``/``events.jsonl`` to replay.
        follow: Follow a run another process is writing until it ends; with no ``run_or_path``, the newest live run.

    Raises:
        FileNotFoundError: When ``run_or_path`` holds no run.
    """
    shell = ipython_shell()
    if follow:
        from trainmeter.ranks.watch import follow as _follow

        _follow(run_or_path, shell=shell)
        return
    if run_or_path is None:
        _display_live(shell)
        return
    state, columns, frame = replay(run_or_path)
    if not in_marimo() and not is_jupyter_shell(shell):  # a terminal: the whole path (nothing is saved there)
        run = run_or_path if isinstance(run_or_path, Run) else load(run_or_path)
        print(summary_text({**state, "run_dir": str(run.dir)}))
        return
    from trainmeter.widget.widget import TrainmeterWidget

    widget = TrainmeterWidget(state=state, history=frame)
    if in_marimo():  # marimo draws the widget object itself, from its history
        show_in_marimo(widget)
        return
    _keep(widget)
    _show_static(state, columns, widget.store_key)


def _show_static(state: dict[str, Any], columns: list[Any], mount_key: str) -> None:
    """The static dashboard, re-mounted live by the widget model (``mount_key``) while the kernel lives."""
    from IPython.display import display as ipy_display

    from trainmeter.widget.snapshot import snapshot_bundle

    ipy_display(snapshot_bundle(state, columns, mount_key=mount_key), raw=True)


def _keep(widget: Any) -> None:
    """Keep a replay's model alive for its mount; the oldest past MAX_REPLAYS_KEPT is closed (its static view stays)."""
    if len(_REPLAYS) == _REPLAYS.maxlen:
        with suppress(Exception):
            _REPLAYS[0].close()
    _REPLAYS.append(widget)


def _display_live(shell: Any) -> None:
    from trainmeter.core.context import active_context

    attach = sys.modules.get("trainmeter.widget.attach")  # loaded: a widget was attached in this kernel
    publisher = attach.live_publisher() if attach is not None else None
    if publisher is not None and in_marimo():  # the same widget once more (it keeps its final state)
        show_in_marimo(publisher.widget)
        return
    if publisher is not None and is_jupyter_shell(shell):
        if publisher.running:
            publisher.show()
        else:  # finished
            _show_static(publisher.widget.state, publisher.feed.series_columns(), publisher.widget.store_key)
        return
    monitor = active_context()
    if monitor is not None:
        print(summary_text(build_state(facts_from_monitor(monitor))))
    elif publisher is not None:
        print(summary_text(publisher.widget.state))
    else:
        print("trainmeter: no run in progress in this kernel; tm.display(path) replays a saved run (see tm.runs())")
