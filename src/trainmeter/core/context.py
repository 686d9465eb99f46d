"""The run context: the one surface through which wings and sinks reach a run (docs/contracts/EXTENSIONS.md)."""

from __future__ import annotations

from operator import attrgetter
from types import MappingProxyType
from typing import Any

# The widget's read-only extension events (docs/protocol.md): the only ones a sink may fan out through the context.
PUBLISHER_EVENTS = frozenset({"warnings", "panels", "charts", "tiles", "markers"})


def _read(path: str, doc: str) -> property:
    """A read-only property of the monitor's ``path`` whose getter is C code (no Python frame on the hot path)."""
    return property(attrgetter(f"_m.{path}"), doc=doc)


def active_context() -> RunContext | None:
    """The context of the run in progress in this process, or ``None`` (``tm.display()`` with no path). Any thread."""
    from trainmeter.core.monitor import active

    run = active()
    return run.context if run is not None else None


class PhaseReadings:
    """The phase clock, read-only: ``totals_s`` (a copy), ``totals_now()``, ``training``, ``session_elapsed_s``."""

    __slots__ = ("_phases", "totals_now", "session_elapsed_s")

    def __init__(self, phases: Any) -> None:
        self._phases = phases
        self.totals_now = phases.totals_now  # seconds per phase with the open training segment, no sync
        self.session_elapsed_s = phases.session_elapsed_s  # seconds since the session began at now_s (0 before)

    totals_s = property(lambda self: dict(self._phases.totals_s), doc="Seconds per phase up to the last transition.")
    training = property(attrgetter("_phases.training"), doc="Whether a training segment is open.")


# The monitor's members a context hands out as they are (made once per run), so a call through the context costs
# no frame of its own; docs/contracts/EXTENSIONS.md lists what each is for.
BOUND = (
    "clock", "elapsed_s", "steps_state",  # the run clock, the step rule read only (the hot path's reads)
    "record", "record_at", "add_reader",  # recording; a sink's series reader
    "carve", "enter_phase", "exit_phase",  # phases (training thread)
    "warn_once", "set_text", "controls", "extension",  # faults, the text line, controls, other wings' views
    "next_step_hook_at", "at_step", "lane_records", "set_run_dir",  # step hooks; the record sink's
)
# The parts' own methods a context hands out the same way, by the names the contract gives them.
PARTS = {
    "describe_series": "registry.describe",  # set series_info[name] (replace=False: only if it has none)
    "watch_lane_losses": "lanes.watch_losses",  # fn(lane, step, value) at a lane's non-finite loss (its thread)
    "watch_training": "dispatch.watch_training",  # on_phase("train", "begin", t_s) at the next training activity
    "unwatch_training": "dispatch.unwatch_training",
    "note_warning": "faults.note",  # a run warning without a Python warning (a merged launch's summary)
    "text_fields": "dispatch.text_fields",  # each wing's text-line fields, in order (the record sink's)
    "passport_sections": "dispatch.passport",  # each wing's section and derivations into a passport (at the end)
    "time_next_step": "steps_state.time_next_step",  # the overhead wing's timing hook
    "set_step_origin": "registry.set_origin",  # a resumed run's points on its training's step axis (the lineage's)
}


class RunContext:
    """One run as its wings and sinks see it, read-only (docs/contracts/EXTENSIONS.md, "The run context")."""

    __slots__ = ("_m", *BOUND, *PARTS)

    def __init__(self, monitor: Any) -> None:
        set_ = object.__setattr__
        set_(self, "_m", monitor)
        for name in (*BOUND, *PARTS):
            set_(self, name, attrgetter(PARTS.get(name, name))(monitor))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the run context is read-only ({name})")

    steps = _read("steps", "Optimizer steps counted so far, over every lane. Any thread.")
    tokens = _read("tokens", "Tokens (or samples, see token_unit) counted so far. Any thread.")
    token_unit = _read("token_unit", "What a counted batch holds: 'tokens' or 'samples'; None while no batch was "
                       "read (tokens unknown, never 0: docs/spec.md section 6).")
    step_origin = _read("registry.origin", "The step this run's step axis starts from (0, or a resumed run's step of "
                        "its training: docs/spec.md section 22). Any thread.")
    step_series = _read("step_series", "Tokens per step and the time of each step (a sink's reads).")
    series = _read("registry.series", "The run's series by name (a dict that never changes size: iterate freely).")
    series_views = _read("registry.views", "One decimated view per series (core/series_views.py): the widget's "
                         "frames and curves.json subscribe to it. Any thread.")

    # -- series provenance -----------------------------------------------------------------------------------
    def annotate_series(self, name: str, key: str, text: str) -> None:
        """Add ``text`` under ``key`` of series ``name``'s provenance, after "; " when another is there (once; in
        place, so a passport section may still annotate the passport's ``series_info``)."""
        info = self._m.series_info.get(name)
        if isinstance(info, dict) and text not in str(info.get(key) or ""):
            info[key] = "; ".join(n for n in (info.get(key), text) if n)

    series_info = property(lambda self: MappingProxyType(self._m.series_info),
                           doc="Series name -> its source and provenance, read-only (write with describe_series).")
    phases = property(lambda self: PhaseReadings(self._m.phases), doc="The phase clock, read-only.")

    # -- faults, the report worker, the model ----------------------------------------------------------------
    warnings = property(lambda self: tuple(self._m.warnings), doc="The run's warnings so far. Any thread.")

    warnings_suppressed = _read("faults.suppressed", "Warnings past the cap, counted only.")
    worker = _read("worker", "The report worker: per-point report work (core/report_worker.py). Any thread.")
    process_memory = _read("process_memory", "The node's memory and thread CPU board (core/memory.py): the node "
                           "sampler's thread posts it, the report and the overhead wing read it.")

    def explicit_step(self, source: str, model: Any = None, samples: int | None = None) -> None:
        """Count one optimizer step a framework made (core/explicit_steps.py ``explicit_step``). Training thread."""
        from trainmeter.core.explicit_steps import explicit_step

        explicit_step(self._m, source, model, samples)

    model_ref = _read("model_ref", "Weakref to the trained root module (after the first optimizer step), or None.")
    probes = _read("probes", "The torch probes (core/probes.py), or None without torch or before the start.")
    params = _read("params", "Parameter counts of the trained model (empty until found).")

    # -- the run, read-only ----------------------------------------------------------------------------------
    options = _read("options", "The run's validated options (trainmeter.options.MonitorOptions).")
    run_dir = _read("run_dir", "The run folder, or None for a run in memory.")
    status = _read("status", "starting, running, then the end status.")
    started_at = _read("lifecycle.started_at", "UTC ISO time of the start.")
    ended_at = _read("lifecycle.ended_at", "UTC ISO time of the end.")
    error = _read("lifecycle.error", "A failed run's exception, as text.")
    exit_code = _read("lifecycle.exit_code", "A failed run's SystemExit code.")
    end_gave_up = _read("lifecycle.gave_up", "The wings the run's end gave up on: wing, job, part, waited_s.")
    series_dropped = _read("series_dropped", "New series names refused past max_series (the passport's).")
    series_dropped_names = _read("series_dropped_names", "The first of them.")
    queue_dropped = _read("queue_dropped", "Emits from other threads dropped (the passport's).")
    emits_ignored = _read("emits_ignored", "Emitted values left out as bad: unreadable, or a refused name.")
    record_sink = _read("record_sink", "The run's record sink (core/sink.py), or None in memory.")

    # -- the last report (sinks) -----------------------------------------------------------------------------
    reports = _read("reports", "Reports made so far.")
    interval = _read("interval", "The last report's IntervalSummary (a training-thread wing's, a sink's).")
    session = _read("session", "The last report's SessionSummary.")
    memory = _read("memory", "The last report's memory sample.")
    text_line = _read("text_line", "The last text line.")

    # -- what the sinks fan out over the wings (each guarded by the dispatcher) ------------------------------
    def collect(self, event: str) -> list[Any]:
        """Every wing's answer to the read-only widget event ``event`` (``PUBLISHER_EVENTS``), flattened."""
        if event not in PUBLISHER_EVENTS:
            raise ValueError(f"not a publisher event: {event!r}")
        return self._m.dispatch.collect(event)

    def progress_bar(self, recent: Any = None) -> dict[str, Any] | None:
        """The header's progress bar: the first wing's that is not ``None``."""
        return next((got for _, got in self._m.dispatch.each("progress_bar", recent) if got is not None), None)


PUBLISHED = frozenset(n for n in vars(RunContext) if not n.startswith("_"))  # tests/test_layout.py checks against it
