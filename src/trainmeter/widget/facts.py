"""What the widget's view shows, gathered (docs/architecture.md): :class:`RunFacts` from a live monitor or a saved run,
and the *report series* (:data:`REPORT_SERIES`: one point per report, x = session seconds at it)."""

# Annotations evaluated (no ``from __future__ import annotations``): dataclasses then skips its string checks of
# RunFacts' 38 fields, a third of this module's import, paid at a script run's finish (docs/spec.md section 20).
import math
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from trainmeter.core.throughput import NO_BATCH_READ, NO_RANK_READ, ratio, tokens_missing
from trainmeter.lineage.view import PARENT_LOSS
from trainmeter.record.textline import format_line
from trainmeter.sizes import format_rate
from trainmeter.verdicts.markers import markers as verdict_markers
from trainmeter.widget.controls import controls_state

REPORT_SERIES: tuple[str, ...] = ("train_tokens_per_s", "session_tokens_per_s", "rss_bytes", "cuda_allocated_bytes")
LIVE_STATUSES = ("starting", "running")
DIVERGED_RATIO = 10.0
UNKNOWN_KIND = "nan/inf"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What the view shows, gathered from one source. Seconds, bytes, tokens as named; the training-only rate is the
    last report window's while ``live``, else the whole run's."""

    name: str
    status: str
    elapsed_s: float = 0.0
    run_dir: str | None = None
    text_line: str = ""
    steps: int = 0
    tokens: int | None = 0
    token_unit: str | None = "tokens"  # None, and tokens None: no batch was read (docs/spec.md section 12)
    tokens_missing: str | None = None  # why, naming the call that declares them
    budget_steps: int | None = None
    budget_tokens: int | None = None
    interval_s: float = 10.0
    window_tokens: int | None = None
    window_train_s: float | None = None
    train_tokens_per_s: float | None = None
    seconds_per_step: float | None = None
    session_tokens_per_s: float | None = None
    train_s: float = 0.0
    rss_bytes: int | None = None
    rss_peak_bytes: int | None = None
    cuda: dict[str, Any] | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    loss_last: float | None = None
    loss_min: float | None = None
    loss_max: float | None = None
    loss_nonfinite: str | None = None  # the newest train_loss point when not finite ("nan", "inf")
    loss_points: int = 0  # train_loss points so far (its smoothed twin is drawn from optim/smoothing.py's MIN_POINTS)
    step_series: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    panels: tuple[dict[str, Any], ...] = ()
    extra_charts: tuple[dict[str, Any], ...] = ()
    extra_tiles: tuple[dict[str, Any], ...] = ()
    progress_bar: dict[str, Any] | None = None
    error: str | None = None
    recent: Any = None  # RecentFigures of the last second while live (widget/live_rate.py), else None
    markers: tuple[dict[str, Any], ...] = ()  # verdict markers (verdicts/markers.py)
    x_map: Any = None  # the step -> tokens, seconds map (widget/x_axis.py XMap): markers' x on every axis
    controls: dict[str, Any] | None = None  # the buttons' path, pending requests, alerts (widget/controls.py)

    @property
    def live(self) -> bool:
        """Whether the run is in progress (a saved run's never is)."""
        return self.status in LIVE_STATUSES

    @property
    def loss_state(self) -> str | None:
        """``nonfinite``, ``diverged`` or ``None`` (the loss as it should be, or none read): how the training loss
        stands, said plainly (docs/spec.md section 12): the newest point was not finite, or the loss is now above
        :data:`DIVERGED_RATIO` times its lowest and at least half its highest (back up to where it started or
        beyond, not a noisy step of a converged run)."""
        last, lowest, highest = self.loss_last, self.loss_min, self.loss_max
        if self.loss_nonfinite is not None:
            return "nonfinite"
        if last is None or lowest is None or highest is None or lowest <= 0:
            return None
        return "diverged" if last > DIVERGED_RATIO * lowest and last >= highest / 2 else None


# -- report series -------------------------------------------------------------------------
def report_points(interval: Any, session: Any, memory: Any) -> dict[str, float]:
    """Values of the report series at one report (``None`` readings are left out)."""
    return _report_values(getattr(interval, "train_tokens_per_s", None),
                          getattr(session, "session_tokens_per_s", None), getattr(memory, "rss_bytes", None),
                          getattr(memory, "cuda", None))


def report_points_from_record(record: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """``(t_s, values)`` of the report series from an ``interval`` record of events.jsonl."""
    tp = record.get("throughput") or {}
    mem = record.get("memory") or {}
    return float(record.get("elapsed_s") or 0.0), _report_values(
        tp.get("train_tokens_per_s"), tp.get("session_tokens_per_s"), mem.get("rss_bytes"), mem.get("cuda"))


def _report_values(train: Any, session: Any, rss: Any, cuda: Any) -> dict[str, float]:
    values = zip(REPORT_SERIES, (train, session, rss, (cuda or {}).get("allocated_bytes")), strict=True)
    return {k: float(v) for k, v in values if v is not None}


# -- gathering ---------------------------------------------------------------------------------
def facts_from_monitor(monitor: Any, recent: Any = None, x_map: Any = None) -> RunFacts:
    """Gather facts from a live (or just finished) monitor; ``recent`` (the publisher's once-a-second
    :class:`~trainmeter.widget.live_rate.RecentFigures`) drives the live rate tile, the ETA and RSS between reports,
    ``x_map`` (:class:`~trainmeter.widget.x_axis.XMap`) places the markers on every x axis. Read-only; any thread."""
    opts = monitor.options
    live = monitor.status in LIVE_STATUSES
    interval, session, memory = monitor.interval, monitor.session, monitor.memory
    try:
        phases_s = monitor.phases.totals_now() if live else dict(monitor.phases.totals_s)
    except (RuntimeError, TypeError):  # the training thread changed the phases mid-read
        phases_s = dict(monitor.phases.totals_s)
    elapsed_s = monitor.elapsed_s() if live or session is None else session.elapsed_s
    series = dict(monitor.series)
    loss = series.get("train_loss")
    stats = loss.stats() if loss is not None else None
    collect = monitor.collect  # a fault warns once and disables that event (core/dispatch.py)
    ext_warnings, panels, charts = collect("warnings"), collect("panels"), collect("charts")
    extra_tiles, markers = collect("tiles"), collect("markers")
    missing, unit = tokens_missing(monitor), monitor.token_unit
    steps, tokens = monitor.steps, None if missing else monitor.tokens
    train_rate, spp = getattr(interval, "train_tokens_per_s", None), getattr(interval, "seconds_per_step", None)
    session_rate = getattr(session, "session_tokens_per_s", None)
    text_line = monitor.text_line or f"[step {steps}]"
    if not live:  # whole-run figures, as the passport has them (the last report window's would contradict them)
        from trainmeter.record.passport import throughput_derivations

        whole = {d.name: d.value for d in throughput_derivations(
            tokens=tokens, steps=steps, train_s=float(phases_s.get("train", 0.0)), elapsed_s=elapsed_s,
            unit=monitor.token_unit)}
        train_rate, spp, session_rate = (whole[k] for k in ("train_tokens_per_s", "seconds_per_step",
                                                            "session_tokens_per_s"))
        if not missing:
            text_line = whole_run_line(text_line, "tok" if unit == "tokens" else "samples", train_rate)
        launch = monitor.extension("distributed") if not steps else None
        if isinstance(launch, dict) and launch.get("role") == "launch":  # a parent that trained nothing speaks for
            steps, tokens, unit = launch.get("global_steps") or 0, launch.get("global_tokens"), launch.get("token_unit")
            missing = None if tokens is not None else NO_RANK_READ  # its launch (docs/spec.md section 19)
            train_rate, spp, session_rate = None, None, ratio(tokens, elapsed_s)
    rss_from = recent if live and getattr(recent, "rss_bytes", None) is not None else memory  # once a second, live
    rss_bytes = getattr(rss_from, "rss_bytes", None)
    peak = max(x for x in (getattr(memory, "rss_peak_bytes", None), rss_bytes, 0) if x is not None) or None
    return RunFacts(
        name=opts.name, status=monitor.status, elapsed_s=elapsed_s, text_line=text_line, steps=steps, tokens=tokens,
        run_dir=str(monitor.run_dir) if monitor.run_dir is not None else None, token_unit=unit, tokens_missing=missing,
        budget_steps=opts.budget_steps, budget_tokens=opts.budget_tokens, interval_s=opts.interval_s,
        window_tokens=getattr(interval, "tokens", None), window_train_s=getattr(interval, "train_s", None),
        train_tokens_per_s=train_rate, seconds_per_step=spp, session_tokens_per_s=session_rate,
        train_s=float(phases_s.get("train", 0.0)), rss_bytes=rss_bytes, rss_peak_bytes=peak,
        cuda=getattr(memory, "cuda", None), phases_s=phases_s, loss_last=getattr(stats, "last", None),
        loss_min=getattr(stats, "min", None), loss_max=getattr(stats, "max", None),
        loss_points=stats.count if stats else 0, loss_nonfinite=_nonfinite(getattr(stats, "last_read", None)),
        step_series=tuple(n for n, s in series.items() if s.x_kind == "step") + ((PARENT_LOSS,) if opts.resume else ()),
        warnings=tuple(list(monitor.warnings) + ext_warnings), panels=tuple(panels), extra_charts=tuple(charts),
        extra_tiles=tuple(extra_tiles), progress_bar=monitor.progress_bar(recent if live else None),
        error=getattr(monitor, "error", None), recent=recent, markers=tuple(markers),
        x_map=x_map, controls=controls_state(monitor),
    )


def whole_run_line(line: str, unit_word: str, tokens_per_s: float | None) -> str:
    """``line`` with its ``train_tok/s=`` field (the last report window's) replaced by the whole run's rate."""
    head, sep, rest = line.partition("] ")
    fields = [f for f in rest.split(" | ") if f] if sep else []
    fields = [f for f in fields if not f.startswith(f"train_{unit_word}/s=")]
    if tokens_per_s is not None:
        at = next((i for i, f in enumerate(fields) if f.split("=", 1)[0] in ("mfu", "mem")), len(fields))
        fields.insert(at, f"train_{unit_word}/s={format_rate(tokens_per_s, '')}")
    return f"{head}] {' | '.join(fields)}" if sep else line


class SavedLog:
    """What the saved-run facts read of a run log, folded record by record (the log is read once, never held): its
    first ``start``, last report (``interval``), the verdicts of the last report that had any, the step series' names
    and the training loss' points and last finite value. One thread."""

    def __init__(self, events: Iterable[dict[str, Any]] = ()) -> None:
        self.start: dict[str, Any] = {}
        self.last: dict[str, Any] = {}
        self.fired: list[Any] = []
        self.step_names: dict[str, None] = {}  # in the order of their first record
        self.loss_last: float | None = None
        self.loss_points = 0  # the smoothed twin is drawn from its window on (optim/smoothing.py)
        deque(self.watch(events), maxlen=0)  # fold them all

    def watch(self, events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Pass ``events`` through, folding each."""
        for e in events:
            kind, name, values = e.get("kind"), e.get("name"), e.get("value")
            if kind == "start" and not self.start:
                self.start = e
            elif kind == "series" and isinstance(name, str):
                if e.get("x", "step") == "step":
                    self.step_names.setdefault(name)
                if name == "train_loss" and isinstance(values, list):
                    self.loss_points += len(values)
                    self.loss_last = next((float(v) for v in reversed(values) if isinstance(v, int | float)
                                           and math.isfinite(v)), self.loss_last)
            elif kind == "interval":
                self.last = e
                fired = (e.get("verdicts") or {}).get("fired")
                self.fired = fired if isinstance(fired, list) else self.fired
            yield e


def facts_from_run(passport: dict[str, Any], events: Iterable[dict[str, Any]] | SavedLog, run_dir: str | None = None,
                   x_map: Any = None) -> RunFacts:
    """Gather facts from a saved run: its passport and run log (its records, or a :class:`SavedLog` of them);
    ``x_map``: the run's :class:`~trainmeter.widget.x_axis.XMap`, from its reports."""
    log = events if isinstance(events, SavedLog) else SavedLog(events)
    opts = passport.get("options") or log.start.get("options") or {}
    step_names = [*log.step_names, *([PARENT_LOSS] if opts.get("resume") else [])]  # the earlier runs' loss (s. 22)
    warnings = list(passport.get("warnings") or [])
    src = passport or log.last  # a run without a passport: the figures of its last report
    tp = src.get("throughput") or {}
    mem = src.get("memory") or {}
    phases_s, elapsed_s = dict(src.get("phases_s") or {}), float(src.get("elapsed_s") or 0.0)
    steps, tokens = int(src.get("steps" if passport else "step") or 0), src.get("tokens")
    unit = src.get("token_unit", "tokens")  # None: no batch was read (an older record names no unit: tokens)
    tokens = int(tokens) if tokens is not None and unit else None
    if passport:
        loss = (passport.get("series") or {}).get("train_loss") or {}
        status = str(passport.get("status", "completed"))
        loss_last, loss_min, loss_max = loss.get("last"), loss.get("min"), loss.get("max")
        # the record keeps that the newest point was not finite, not which
        nonfinite = UNKNOWN_KIND if loss_last is None and loss.get("nonfinite") else None
    else:
        status = "interrupted"
        loss_last, loss_min, loss_max, nonfinite = log.loss_last, None, None, None
        warnings.append("this run has no passport: it did not finish (kernel killed?); figures are from its "
                        "last report")
    train_rate, session_rate, spp = (tp.get(k) for k in ("train_tokens_per_s", "session_tokens_per_s",
                                                         "seconds_per_step"))
    verdicts = list(passport["verdicts"]) if isinstance(passport.get("verdicts"), list) else log.fired
    warnings.extend(v["sentence"] for v in verdicts  # the live header showed them as warnings
                    if isinstance(v, dict) and v.get("sentence") and v["sentence"] not in warnings)
    card, bar = [], None  # the compute and energy wings' tiles, the compute wing's progress bar
    compute = passport.get("compute")
    if isinstance(compute, dict):
        from trainmeter.compute.card import compute_tiles, progress_bar

        derivations = {d["name"]: d for d in passport.get("derivations") or [] if isinstance(d, dict)}
        card, bar = list(compute_tiles(compute, derivations)), progress_bar(compute, derivations)
    energy = passport.get("energy")
    if isinstance(energy, dict) and energy:
        with suppress(Exception):  # an odd passport loses the replay's energy tile, nothing else
            from trainmeter.energy.summary import energy_tile

            card.append(energy_tile(energy, passport.get("derivations") or []))
    unit_word = None if tokens is None else "tok" if unit == "tokens" else "samples"
    line = format_line(steps, series={"train_loss": loss_last}, tokens_per_s=train_rate, token_unit=unit_word)
    return RunFacts(
        name=str(passport.get("name") or log.start.get("name") or "run"), status=status, elapsed_s=elapsed_s,
        run_dir=run_dir, text_line=line, steps=steps, tokens=tokens, token_unit=unit if tokens is not None else None,
        tokens_missing=src.get("tokens_missing") or (None if tokens is not None else NO_BATCH_READ),
        budget_steps=opts.get("budget_steps"), budget_tokens=opts.get("budget_tokens"),
        interval_s=float(opts.get("interval_s") or 10.0),
        train_tokens_per_s=train_rate, seconds_per_step=spp, session_tokens_per_s=session_rate,
        train_s=float(phases_s.get("train", 0.0)), rss_bytes=mem.get("rss_bytes"),
        rss_peak_bytes=mem.get("rss_peak_bytes"), cuda=mem.get("cuda"), phases_s=phases_s, loss_last=loss_last,
        loss_min=loss_min, loss_max=loss_max, loss_nonfinite=nonfinite, loss_points=log.loss_points,
        step_series=tuple(step_names), warnings=tuple(warnings), extra_tiles=tuple(card),
        progress_bar=bar, error=passport.get("error"), markers=tuple(verdict_markers(verdicts)), x_map=x_map,
    )


def _nonfinite(value: float | None) -> str | None:
    """The live series' newest point as Python prints it (``nan``, ``inf``, ``-inf``: the text line's spelling) when
    not finite."""
    return None if value is None or math.isfinite(value) else repr(float(value))
