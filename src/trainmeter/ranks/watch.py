"""``tm.display(path_or_run, follow=True)``: watch a run another process writes (docs/spec.md section 19).

In a notebook a daemon thread updates the widget until the run ends or falls silent; elsewhere one line per change.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from trainmeter.options import DEFAULT_RUN_ROOT
from trainmeter.ranks.follow import MAX_READ_BYTES, RunFollower, newest_live_run
from trainmeter.ranks.merge import launch_mfu_tile, launch_tokens_tile, load_passport, ranks_panel
from trainmeter.ranks.seating import SEAT_PREFIXES
from trainmeter.record.events import LOG_FILE, Record
from trainmeter.widget.frame import encode_frame
from trainmeter.widget.show import ReplayFeed
from trainmeter.widget.view_model import build_state, facts_from_run, summary_text

POLL_S = 1.0
IDLE_S = 600.0


def resolve(run_or_path: Any = None, root: Path | None = None) -> Path:
    """The run folder to follow: the one given, or the newest live run under ``root`` (``FileNotFoundError``: none
    grew in the last two minutes, or the path holds no run)."""
    if run_or_path is None:
        base = Path(root) if root is not None else DEFAULT_RUN_ROOT
        found = newest_live_run(base)
        if found is None:
            raise FileNotFoundError(f"no live run under {str(base)!r} (none wrote in the last 2 minutes); "
                                    "pass tm.display(path, follow=True) with a run folder")
        return found
    path = Path(getattr(run_or_path, "dir", run_or_path))
    if path.is_file():
        path = path.parent
    if path.name.startswith(SEAT_PREFIXES) and path.parent.is_dir():
        path = path.parent  # a seat: follow its launch
    if not path.is_dir():
        raise FileNotFoundError(f"no trainmeter run at {str(run_or_path)!r}: expected a run folder")
    return path


class RunWatch:
    """Incremental, bounded view of a run folder being written (its log, else its lowest rank's, and every seat's;
    ``max_bytes`` per file per poll)."""

    def __init__(self, run_dir: Path, max_bytes: int = MAX_READ_BYTES) -> None:
        self.run_dir = Path(run_dir)
        self.followers = RunFollower(self.run_dir, max_bytes)
        self._primary: str | None = None  # the seat whose log feeds the charts: "" (the run's own), else a rank's
        self._start: dict[str, Any] = {}
        self._interval: dict[str, Any] = {}
        self._latest_series: dict[str, dict[str, Any]] = {}
        self._feed = ReplayFeed()  # the charts' history and step -> tokens/time map
        self.passport: dict[str, Any] = {}
        self.polls = 0
        self.widget: Any = None  # set by follow() in a notebook
        self.thread: threading.Thread | None = None

    def poll(self) -> dict[str, Any]:
        """Read what was appended since the last poll; return the widget state."""
        self.polls += 1
        self.followers.poll(self._take)
        if not self.passport:  # missing, or damaged: followed from the log
            self.passport = load_passport(self.run_dir / "passport.json")
        events = [e for e in (self._start, *self._latest_series.values(), self._interval) if e]
        state = build_state(facts_from_run(self.passport, events, run_dir=str(self.run_dir), x_map=self._feed.x_map))
        if not self.passport:
            state["status"] = "running"
            state["warnings"] = [w for w in state.get("warnings", []) if "has no passport" not in w]
        panel = ranks_panel(self.followers)
        if panel is not None:
            state["panels"] = [*state.get("panels", []), panel]
        ranks = self.followers.ranks()
        if len(ranks) > 1:
            state["tiles"] = [*state.get("tiles", []), launch_mfu_tile(ranks)]
        if not (self.run_dir / LOG_FILE).exists():  # no parent: the log read is one rank's, not the launch's
            own = next((t for t in state.get("tiles", []) if t.get("id") == "tokens"), {})
            total = launch_tokens_tile(ranks, str(own.get("label") or "tokens"))
            if total is not None:
                state["tiles"] = [total if t.get("id") == "tokens" else t for t in state.get("tiles", [])]
        return state

    def _take(self, seat: str, record: Record) -> None:
        if self._primary is None:  # the run's own log, else its lowest rank's
            ranks = sorted((k for k in self.followers.sources if k.startswith("rank-")), key=lambda k: (len(k), k))
            self._primary = "" if "" in self.followers.sources else next(iter(ranks), None)
        if seat != self._primary:
            return
        kind = record.get("kind")
        if kind in ("start", "interval"):  # the latest of each
            setattr(self, f"_{kind}", record)
        elif kind == "series":
            self._latest_series[str(record.get("name"))] = record
        self._feed.take(record)

    def history(self) -> bytes:
        """The decimated history as a widget frame (each point on every x axis)."""
        return encode_frame(self.polls, self._feed.columns())

    def ended(self) -> bool:
        """Whether the run wrote its passport (every rank of a launch merged, or the parent finished)."""
        return bool(self.passport) and str(self.passport.get("status")) != "unfinished"


def follow(run_or_path: Any = None, *, poll_s: float = POLL_S, idle_s: float = IDLE_S,
           out: TextIO | None = None, shell: Any = None) -> RunWatch:
    """Show a run another process writes, updating until it ends or falls silent for ``idle_s``; the watch
    (``FileNotFoundError``: see :func:`resolve`)."""
    watch = RunWatch(resolve(run_or_path))
    state = watch.poll()
    if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
        from IPython.display import display as ipy_display

        from trainmeter.widget.widget import TrainmeterWidget

        widget = TrainmeterWidget(state=state, history=watch.history())
        ipy_display(widget)
        watch.widget = widget

        def show(state: dict[str, Any]) -> None:
            widget.state, widget.history = state, watch.history()

        watch.thread = threading.Thread(target=_until_end, args=(watch, show, poll_s, idle_s, True),
                                        name="trainmeter-follow", daemon=True)
        watch.thread.start()
        return watch
    printed = [""]

    def say(state: dict[str, Any]) -> None:
        if (line := summary_text(state)) != printed[0]:
            print(line, file=out or sys.stdout, flush=True)
            printed[0] = line

    say(state)
    _until_end(watch, say, poll_s, idle_s, False)
    return watch


def _until_end(watch: RunWatch, show: Callable[[dict[str, Any]], None], poll_s: float, idle_s: float,
               quiet: bool) -> None:
    """``show`` each poll's state until the run ends or every log was silent for ``idle_s``; ``quiet``: a fault
    ends the updates silently (the widget's thread)."""
    begun = time.time()
    while not watch.ended() and time.time() - max(
            [begun, *(s.updated_s for s in watch.followers.sources.values() if s.updated_s)]) <= idle_s:
        time.sleep(poll_s)
        try:
            show(watch.poll())
        except Exception:
            if not quiet:
                raise
            return
