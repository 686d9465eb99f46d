"""The widget's view model: the ``state`` dict of docs/protocol.md, from a live run or a saved one.

Every number here is read from the monitor or the run record; the front end
computes nothing. Two steps: gather :class:`RunFacts` (from a live
:class:`~trainmeter.core.monitor.Monitor`, or from a saved run's passport and
events), then :func:`build_state` (pure). Throughput and memory over time are
the *report series*: one point per report, read from ``monitor.interval``,
``monitor.session`` and ``monitor.memory`` (live) or from the ``interval``
records of ``events.jsonl`` (replay), with x = session seconds at the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainmeter.core.provenance import Derivation, Input, weakest
from trainmeter.record.runlog import clean
from trainmeter.record.textline import format_line
from trainmeter.sizes import format_bytes, format_count
from trainmeter.verdicts.markers import markers as verdict_markers
from trainmeter.widget.labels import label_charts
from trainmeter.widget.x_axis import x_axis_state

REPORT_SERIES: tuple[str, ...] = ("train_tokens_per_s", "session_tokens_per_s", "rss_bytes", "cuda_allocated_bytes")
LOSS_NAMES: tuple[str, ...] = ("train_loss", "val_loss")
MAX_SERIES_CHARTS = 8
LIVE_STATUSES = ("starting", "running")
RECENT_SERIES = "recent_tokens_per_s"  # the once-a-second sliding-window rate (widget/live_rate.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What the view shows, gathered from one source. Seconds, bytes, tokens as named.

    ``live`` runs show the latest report window's training-only rate; finished runs
    the whole run's (tokens / training seconds).
    """

    name: str
    status: str
    elapsed_s: float = 0.0
    run_dir: str | None = None
    text_line: str = ""
    steps: int = 0
    tokens: int = 0
    token_unit: str = "tokens"
    budget_steps: int | None = None
    budget_tokens: int | None = None
    interval_s: float = 10.0
    live: bool = True
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
    step_series: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    panels: tuple[dict[str, Any], ...] = ()
    extra_charts: tuple[dict[str, Any], ...] = ()
    extra_tiles: tuple[dict[str, Any], ...] = ()
    progress_bar: dict[str, Any] | None = None
    error: str | None = None
    recent: Any = None  # RecentFigures of the last second while live (widget/live_rate.py), else None
    markers: tuple[dict[str, Any], ...] = ()  # verdict markers (verdicts/markers.py)
    x_head: tuple[int, int, float] | None = None  # (step, cumulative tokens, s) of the newest step while live


# -- report series -------------------------------------------------------------------------
def report_points(interval: Any, session: Any, memory: Any) -> dict[str, float]:
    """Values of the report series at one report (``None`` readings are left out)."""
    values = {
        "train_tokens_per_s": getattr(interval, "train_tokens_per_s", None),
        "session_tokens_per_s": getattr(session, "session_tokens_per_s", None),
        "rss_bytes": getattr(memory, "rss_bytes", None),
        "cuda_allocated_bytes": ((getattr(memory, "cuda", None) or {}).get("allocated_bytes")),
    }
    return {k: float(v) for k, v in values.items() if v is not None}


def report_points_from_record(record: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """``(t_s, values)`` of the report series from an ``interval`` record of events.jsonl."""
    tp = record.get("throughput") or {}
    mem = record.get("memory") or {}
    values = {
        "train_tokens_per_s": tp.get("train_tokens_per_s"),
        "session_tokens_per_s": tp.get("session_tokens_per_s"),
        "rss_bytes": mem.get("rss_bytes"),
        "cuda_allocated_bytes": (mem.get("cuda") or {}).get("allocated_bytes"),
    }
    return float(record.get("elapsed_s") or 0.0), {k: float(v) for k, v in values.items() if v is not None}


# -- gathering ---------------------------------------------------------------------------------
def _extension_extras(monitor: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]],
                                             list[dict[str, Any]], list[dict[str, Any]]]:
    dispatch = monitor.dispatch  # a fault warns once and disables that event (core/dispatch.py)
    return (dispatch.collect("warnings"), dispatch.collect("panels"), dispatch.collect("charts"),
            dispatch.collect("tiles"), dispatch.collect("markers"))


def _progress_from_extensions(monitor: Any, recent: Any = None) -> dict[str, Any] | None:
    return monitor.dispatch.first("progress_bar", recent)


def facts_from_monitor(monitor: Any, recent: Any = None, x_head: tuple[int, int, float] | None = None) -> RunFacts:
    """Gather facts from a live (or just finished) monitor. Read-only; any thread.

    ``recent`` (:class:`~trainmeter.widget.live_rate.RecentFigures`, from the publisher
    once a second) drives the live rate tile, the ETA and RSS between reports; ``x_head``
    (the publisher's newest step, cumulative tokens and seconds) is the x mappings' live end.
    """
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
    ext_warnings, panels, charts, extra_tiles, markers = _extension_extras(monitor)
    steps, tokens = monitor.steps, monitor.tokens
    train_rate = interval.train_tokens_per_s if interval else None
    spp = interval.seconds_per_step if interval else None
    session_rate = session.session_tokens_per_s if session else None
    if not live:  # whole-run figures, as the passport has them
        from trainmeter.record.passport import throughput_derivations

        whole = {d.name: d.value for d in throughput_derivations(
            tokens=tokens, steps=steps, train_s=float(phases_s.get("train", 0.0)), elapsed_s=elapsed_s,
            unit=monitor.token_unit)}
        train_rate, spp, session_rate = whole["train_tokens_per_s"], whole["seconds_per_step"], whole[
            "session_tokens_per_s"]
    rss_bytes = memory.rss_bytes if memory else None
    if live and recent is not None and recent.rss_bytes is not None:
        rss_bytes = recent.rss_bytes
    return RunFacts(
        name=opts.name, status=monitor.status, elapsed_s=elapsed_s,
        run_dir=str(monitor.run_dir) if monitor.run_dir is not None else None,
        text_line=monitor.text_line or f"[step {steps}]", steps=steps, tokens=tokens,
        token_unit=monitor.token_unit, budget_steps=opts.budget_steps, budget_tokens=opts.budget_tokens,
        interval_s=opts.interval_s, live=live,
        window_tokens=interval.tokens if interval else None,
        window_train_s=interval.train_s if interval else None,
        train_tokens_per_s=train_rate, seconds_per_step=spp, session_tokens_per_s=session_rate,
        train_s=float(phases_s.get("train", 0.0)),
        rss_bytes=rss_bytes,
        rss_peak_bytes=max(x for x in (memory.rss_peak_bytes if memory else None, rss_bytes, 0) if x is not None)
        or None,
        cuda=memory.cuda if memory else None, phases_s=phases_s,
        loss_last=stats.last if stats else None, loss_min=stats.min if stats else None,
        step_series=tuple(n for n, s in series.items() if s.x_kind == "step"),
        warnings=tuple(list(monitor.warnings) + ext_warnings), panels=tuple(panels), extra_charts=tuple(charts),
        extra_tiles=tuple(extra_tiles), progress_bar=_progress_from_extensions(monitor, recent if live else None),
        error=getattr(monitor, "error", None), recent=recent if live else None, markers=tuple(markers),
        x_head=x_head if live else None,
    )


def facts_from_run(passport: dict[str, Any], events: list[dict[str, Any]], run_dir: str | None = None) -> RunFacts:
    """Gather facts from a saved run (passport and events.jsonl records)."""
    start = next((e for e in events if e.get("kind") == "start"), {})
    last = next((e for e in reversed(events) if e.get("kind") == "interval"), {})
    opts = passport.get("options") or start.get("options") or {}
    step_names = list(dict.fromkeys(e["name"] for e in events
                                    if e.get("kind") == "series" and e.get("x", "step") == "step"))
    warnings = list(passport.get("warnings") or [])
    if passport:
        tp = passport.get("throughput") or {}
        mem = passport.get("memory") or {}
        loss = (passport.get("series") or {}).get("train_loss") or {}
        status, phases_s = str(passport.get("status", "completed")), dict(passport.get("phases_s") or {})
        steps, tokens = int(passport.get("steps") or 0), int(passport.get("tokens") or 0)
        elapsed_s, unit = float(passport.get("elapsed_s") or 0.0), str(passport.get("token_unit", "tokens"))
        train_rate, session_rate = tp.get("train_tokens_per_s"), tp.get("session_tokens_per_s")
        spp, loss_last, loss_min = tp.get("seconds_per_step"), loss.get("last"), loss.get("min")
    else:
        tp = last.get("throughput") or {}
        mem = last.get("memory") or {}
        status, phases_s = "interrupted", dict(last.get("phases_s") or {})
        steps, tokens = int(last.get("step") or 0), int(last.get("tokens") or 0)
        elapsed_s, unit = float(last.get("elapsed_s") or 0.0), "tokens"
        train_rate, session_rate, spp = tp.get("train_tokens_per_s"), tp.get("session_tokens_per_s"), tp.get(
            "seconds_per_step")
        loss_last = _last_value(events, "train_loss")
        loss_min = None
        warnings.append("this run has no passport: it did not finish (kernel killed?); figures are from its "
                        "last report")
    verdicts = _saved_verdicts(passport, events)
    warnings.extend(v["sentence"] for v in verdicts  # the live header showed them as warnings
                    if isinstance(v, dict) and v.get("sentence") and v["sentence"] not in warnings)
    extra_tiles: tuple[dict[str, Any], ...] = ()
    bar = None
    energy = _energy_tiles(passport)
    compute = passport.get("compute")
    if isinstance(compute, dict):
        from trainmeter.compute.card import compute_tiles, progress_bar

        derivations = {d["name"]: d for d in passport.get("derivations") or [] if isinstance(d, dict)}
        extra_tiles = tuple(compute_tiles(compute, derivations))
        bar = progress_bar(compute, derivations)
    extra_tiles = extra_tiles + tuple(energy)
    unit_word = "tok" if unit == "tokens" else "samples"
    line = format_line(steps, series={"train_loss": loss_last}, tokens_per_s=train_rate, token_unit=unit_word)
    return RunFacts(
        name=str(passport.get("name") or start.get("name") or "run"), status=status, elapsed_s=elapsed_s,
        run_dir=run_dir, text_line=line, steps=steps, tokens=tokens, token_unit=unit,
        budget_steps=opts.get("budget_steps"), budget_tokens=opts.get("budget_tokens"),
        interval_s=float(opts.get("interval_s") or 10.0), live=False,
        train_tokens_per_s=train_rate, seconds_per_step=spp, session_tokens_per_s=session_rate,
        train_s=float(phases_s.get("train", 0.0)), rss_bytes=mem.get("rss_bytes"),
        rss_peak_bytes=mem.get("rss_peak_bytes"), cuda=mem.get("cuda"), phases_s=phases_s,
        loss_last=loss_last, loss_min=loss_min, step_series=tuple(step_names), warnings=tuple(warnings),
        extra_tiles=extra_tiles, progress_bar=bar, error=passport.get("error"),
        markers=tuple(verdict_markers(verdicts)),
    )


def _saved_verdicts(passport: dict[str, Any], events: list[dict[str, Any]]) -> list[Any]:
    """The passport's ``verdicts``, else those of the last report that had any (a run without a passport)."""
    if isinstance(passport.get("verdicts"), list):
        return list(passport["verdicts"])
    for e in reversed(events):
        fired = (e.get("verdicts") or {}).get("fired") if e.get("kind") == "interval" else None
        if isinstance(fired, list):
            return fired
    return []


def _energy_tiles(passport: dict[str, Any]) -> list[dict[str, Any]]:
    """The energy tile of a saved run, with its derivation, from the passport's ``energy`` section."""
    section = passport.get("energy")
    if not isinstance(section, dict) or not section:
        return []
    try:
        from trainmeter.energy.summary import energy_tile

        chosen = "j_per_sample" if section.get("per") == "sample" else "j_per_token"
        saved = next((d for d in passport.get("derivations") or []
                      if isinstance(d, dict) and d.get("name") == chosen), None)
        return [energy_tile(section, _SavedDerivation(saved) if saved else None)]  # type: ignore[arg-type]
    except Exception:
        return []  # an odd passport loses the replay's energy tile, nothing else


@dataclass(frozen=True, slots=True)
class _SavedDerivation:
    """A passport's derivation dict where a Derivation is expected (only ``to_dict`` is read)."""

    saved: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.saved)


def _last_value(events: list[dict[str, Any]], name: str) -> float | None:
    for e in reversed(events):
        if e.get("kind") == "series" and e.get("name") == name:
            for v in reversed(e.get("value") or []):
                if v is not None and math.isfinite(v):
                    return float(v)
    return None


# -- the state --------------------------------------------------------------------------------
def progress(*, steps: int, tokens: int, budget_steps: int | None, budget_tokens: int | None,
             seconds_per_step: float | None, train_tokens_per_s: float | None, token_unit: str = "tokens",
             live: bool = True, recent: Any = None) -> dict[str, Any] | None:
    """The progress bar: fraction of the budget and the ETA (s).

    While live with ``recent`` figures, the ETA is at the recent wall-clock pace (it
    moves every second and counts eval and data waits); otherwise at the
    training-only pace of the last report.
    """
    pace = "recent" if recent is not None else "training-only"
    if budget_steps:
        done, budget, unit = steps, budget_steps, "steps"
        rate = recent.steps_per_s if recent is not None else (1.0 / seconds_per_step if seconds_per_step else None)
    elif budget_tokens:
        done, budget, unit = tokens, budget_tokens, token_unit
        rate = recent.tokens_per_s if recent is not None else train_tokens_per_s
    else:
        return None
    remaining = max(0, budget - done)
    eta_s = remaining / rate if (live and rate) else None
    return {"fraction": min(1.0, done / budget), "eta_s": eta_s, "pace": pace,
            "label": f"{format_count(done)} / {format_count(budget)} {unit}"}


def _rate_derivation(f: RunFacts) -> dict[str, Any]:
    unit = f"{f.token_unit}/s"
    if f.live:
        d = Derivation(name="train_tokens_per_s", formula="window_tokens / window_train_s",
                       value=f.train_tokens_per_s, unit=unit,
                       inputs=(Input(name="window_tokens", value=f.window_tokens, unit=f.token_unit,
                                     provenance="counted", source="root module batches since the last report"),
                               Input(name="window_train_s", value=f.window_train_s, unit="s",
                                     provenance="measured", source="phase clock: train, since the last report")),
                       missing=None if f.train_tokens_per_s is not None else "a report with training time")
    else:
        d = Derivation(name="train_tokens_per_s", formula="tokens / train_s", value=f.train_tokens_per_s,
                       unit=unit, inputs=(Input(name="tokens", value=f.tokens, unit=f.token_unit,
                                                provenance="counted", source="root module batches"),
                                          Input(name="train_s", value=f.train_s, unit="s", provenance="measured",
                                                source="phase clock: train")))
    return d.to_dict()


def tiles(f: RunFacts) -> list[dict[str, Any]]:
    """The tiles: step, tokens, training-only vs session rate, loss, memory (RSS, CUDA)."""
    short = "tok" if f.token_unit == "tokens" else f.token_unit
    step_sub = f"of {format_count(f.budget_steps)}" if f.budget_steps else (
        f"{f.seconds_per_step:.3g} s/step" if f.seconds_per_step else "")
    out: list[dict[str, Any]] = [
        {"id": "step", "label": "step", "value": f.steps, "unit": "count", "sub": step_sub, "provenance": "counted"},
        {"id": "tokens", "label": f.token_unit, "value": f.tokens,
         "unit": "tokens" if f.token_unit == "tokens" else "count",
         "sub": f"of {format_count(f.budget_tokens)}" if f.budget_tokens else "", "provenance": "counted"},
    ]
    rate: dict[str, Any] = {
        "id": "throughput", "label": "training-only rate" + ("" if f.live else " (whole run)"),
        "value": f.train_tokens_per_s, "unit": "tokens/s" if f.token_unit == "tokens" else "samples/s",
        "provenance": "measured",
        "sub": f"session {format_count(f.session_tokens_per_s)} {short}/s", "derivation": _rate_derivation(f)}
    if f.train_tokens_per_s is None:
        rate["missing"] = f"the first report (every {f.interval_s:g} s) with training time"
    if f.live and f.recent is not None:
        r = f.recent
        rate = {
            "id": "throughput", "label": f"rate (last {r.window_s:.0f} s)" if r.window_s >= 1 else "rate (first second)", "value": r.tokens_per_s,
            "unit": rate["unit"], "provenance": "measured",
            "sub": (f"training-only {format_count(f.train_tokens_per_s)} {short}/s" if f.train_tokens_per_s
                    else "wall clock, every phase"),
            "derivation": Derivation(
                name="recent_tokens_per_s", formula="window_tokens / window_s", value=r.tokens_per_s,
                unit=f"{f.token_unit}/s",
                inputs=(Input(name="window_tokens", value=r.window_tokens, unit=f.token_unit, provenance="counted",
                              source=f"root module batches of the last {r.window_steps} steps"),
                        Input(name="window_s", value=r.window_s, unit="s", provenance="measured",
                              source="wall clock from the step before the window to the last step"))).to_dict()}
    out.append(rate)
    loss: dict[str, Any] = {"id": "loss", "label": "loss", "value": f.loss_last, "unit": "",
                            "sub": f"min {f.loss_min:.4g}" if f.loss_min is not None else "", "provenance": "measured"}
    if f.loss_last is None:
        loss["missing"] = "a loss: return it from the loss module, or tm.emit(train_loss=loss)"
    out.append(loss)
    rss: dict[str, Any] = {"id": "rss", "label": "memory (RSS)", "value": f.rss_bytes, "unit": "bytes",
                           "sub": f"peak {format_bytes(f.rss_peak_bytes)} sampled" if f.rss_peak_bytes else "",
                           "provenance": "measured"}
    if f.rss_bytes is None:
        rss["missing"] = "psutil (pip install psutil)"
    out.append(rss)
    cuda = f.cuda or {}
    if cuda.get("allocated_bytes") is not None:
        peak, total = cuda.get("peak_allocated_bytes") or cuda.get("max_allocated_bytes"), cuda.get("device_total_bytes")
        sub = " · ".join(p for p in (f"peak {format_bytes(peak)}" if peak else "",
                                     f"of {format_bytes(total)}" if total else "") if p)
        out.append({"id": "cuda_memory", "label": "CUDA allocated", "value": cuda["allocated_bytes"],
                    "unit": "bytes", "sub": sub, "provenance": "measured"})
    return out


def charts(f: RunFacts) -> list[dict[str, Any]]:
    """Chart specs: loss (step), other step series, throughput and memory (time), then extensions'."""
    losses = list(LOSS_NAMES) + [n for n in f.step_series if "loss" in n and n not in LOSS_NAMES]
    out: list[dict[str, Any]] = [{"id": "loss", "title": "loss", "x": "step", "unit": "", "series": losses,
                                  "log_y": f.loss_min is not None and f.loss_min > 0}]  # early spikes stay readable
    drawn = {n for c in f.extra_charts if isinstance(c, dict) for n in (c.get("series") or ())}  # lr on its log axis
    others = [n for n in f.step_series if "loss" not in n and n not in drawn]
    for name in others[:MAX_SERIES_CHARTS]:
        out.append({"id": f"series:{name}", "title": name, "x": "step", "unit": "", "series": [name]})
    if others[MAX_SERIES_CHARTS:]:
        out.append({"id": "series:more", "title": "more series", "x": "step", "unit": "",
                    "series": others[MAX_SERIES_CHARTS:]})
    out.append({"id": "throughput", "title": f"throughput ({f.token_unit}/s)", "x": "time",
                "unit": "tokens/s" if f.token_unit == "tokens" else "samples/s",
                "series": [RECENT_SERIES, "train_tokens_per_s"]})
    out.append({"id": "memory", "title": "memory", "x": "time", "unit": "bytes",
                "series": ["rss_bytes", "cuda_allocated_bytes"]})
    seen = {c["id"] for c in out}
    out.extend(c for c in f.extra_charts if isinstance(c, dict) and c.get("id") not in seen)
    return out


def run_paths(run_dir: str | None, cwd: str | None = None) -> tuple[str | None, str | None]:
    """The run folder absolute, and relative to ``cwd`` (the kernel's folder: the notebook's) or ``None``.

    The front end turns them into links the Jupyter server serves (js/src/runlinks.ts).
    No filesystem access beyond the working folder's name.
    """
    if not run_dir:
        return None, None
    import os

    base = cwd or os.getcwd()
    path = os.path.abspath(os.path.join(base, run_dir))
    rel = os.path.relpath(path, base)
    return path, (None if rel == ".." or rel.startswith(".." + os.sep) else rel.replace(os.sep, "/"))


def _badged_derivation(d: dict[str, Any]) -> dict[str, Any]:
    inputs = [i for i in d.get("inputs") or [] if isinstance(i, dict) and i.get("value") is not None]
    prov = weakest(i.get("provenance") for i in inputs)
    if prov is None:
        return d
    each = ", ".join(f"{i.get('name')} {i.get('provenance')}" for i in inputs)
    return {**d, "provenance": prov, "provenance_note": f"{prov}: the weakest of its inputs ({each})"}


def badge_tiles(tiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Badges only on values, and a derived value's badge follows its inputs.

    A tile whose value is missing loses its badge and says why (``missing``: the reason
    and the input that would enable it). A tile with derivations takes the weakest
    provenance of their inputs (``assumed`` < ``declared`` < ``detected`` < ``measured``
    < ``counted``), and each derivation says so (``provenance``, ``provenance_note``).
    """
    out = []
    for tile in tiles:
        t = dict(tile)
        derivs = [d for d in (t.get("derivations") or [t.get("derivation")]) if isinstance(d, dict)]
        if t.get("value") is None and not t.get("text"):
            t.pop("provenance", None)
            if not t.get("missing"):
                t["missing"] = next((d["missing"] for d in derivs if d.get("missing")), "not measured yet")
        elif derivs:
            badged = [_badged_derivation(d) for d in derivs]
            prov = weakest(d.get("provenance") for d in badged if d.get("provenance"))
            if prov is not None:
                t["provenance"] = prov
            if t.get("derivation") is not None:
                t["derivation"] = _badged_derivation(t["derivation"])
            if t.get("derivations"):
                t["derivations"] = badged
        out.append(t)
    return out


def build_state(f: RunFacts) -> dict[str, Any]:
    """Return the ``state`` traitlet value (JSON-safe: non-finite floats become null)."""
    rate = f.train_tokens_per_s
    bar = f.progress_bar or progress(
        steps=f.steps, tokens=f.tokens, budget_steps=f.budget_steps, budget_tokens=f.budget_tokens,
        seconds_per_step=f.seconds_per_step, train_tokens_per_s=rate, token_unit=f.token_unit, live=f.live,
        recent=f.recent)
    if bar is not None and f.status not in LIVE_STATUSES:
        bar = {**bar, "eta_s": None}  # a finished run has no ETA, whoever built the bar
    run_path, run_rel = run_paths(f.run_dir)
    state = {
        "name": f.name, "status": f.status, "elapsed_s": round(f.elapsed_s, 1), "run_dir": f.run_dir,
        "run_path": run_path, "run_rel": run_rel,
        "text_line": f.text_line, "step": f.steps, "error": f.error,
        "progress": bar,
        "tiles": badge_tiles(tiles(f) + [t for t in f.extra_tiles if isinstance(t, dict)]),
        "phases_s": {k: round(float(v), 3) for k, v in f.phases_s.items()},
        "charts": label_charts(charts(f), f.token_unit),
        "panels": [p for p in f.panels if isinstance(p, dict)],
        "warnings": [str(w) for w in f.warnings],
        "markers": verdict_markers(f.markers),
        "x_axis": x_axis_state(tokens=f.tokens, token_unit=f.token_unit, head=f.x_head),
    }
    return clean(state)


def summary_text(state: dict[str, Any]) -> str:
    """One text line for a state: where widgets do not render."""
    where = f"; run folder {state['run_dir']}" if state.get("run_dir") else ""
    return f"trainmeter: {state.get('name')} [{state.get('status')}] {state.get('text_line', '')}{where}"
