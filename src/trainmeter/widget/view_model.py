"""The widget's view model: :func:`build_state` (pure) turns the :class:`~trainmeter.widget.facts.RunFacts` of a live
or saved run into the ``state`` of docs/protocol.md (tests/widget/wire_types.py ``State``); ``dashboard.json``, the
final state ``tm.display(run)`` replays (here, so a run without a widget writes it without loading the publisher)."""

from __future__ import annotations

import json
import math
import os
from contextlib import suppress
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from trainmeter.compute.eta import REPORT_WINDOW, Pace, eta, pace_of, recent_pace
from trainmeter.core.provenance import Derivation, Input, weakest
from trainmeter.core.throughput import NO_BATCH_READ
from trainmeter.optim.smoothing import smoothed_spec
from trainmeter.record.runlog import clean, write_file_atomic
from trainmeter.sizes import format_bytes, format_count, format_count_pair, format_number, format_rate, format_seconds
from trainmeter.verdicts.markers import markers as verdict_markers
from trainmeter.widget.facts import RunFacts, facts_from_monitor, facts_from_run  # noqa: F401  (re-exported: inputs)
from trainmeter.widget.look import LOOK, label_charts
from trainmeter.widget.x_axis import place_markers, x_axis_state

LOSS_NAMES: tuple[str, ...] = ("train_loss", "val_loss")
MAX_SERIES_CHARTS = 8
MAX_CHART_LINES = 24
"""Most lines of the loss and the "more series" charts, whatever ``--max-series`` is; the title counts the rest."""
RECENT_SERIES = "recent_tokens_per_s"  # the once-a-second sliding-window rate (widget/live_rate.py)
RECENT_TRAIN_SERIES = "recent_train_tokens_per_s"  # its training-only rate over the same window
DASHBOARD_FILE = "dashboard.json"


# -- the state --------------------------------------------------------------------------------
def progress(f: RunFacts) -> dict[str, Any] | None:
    """The progress bar: fraction of the budget and the ETA (s) by the one rule (compute/eta.py): at the recent
    wall-clock pace while live with ``recent`` figures, else at the last report's training-only pace."""
    if f.budget_steps:
        done, budget, unit, label_unit = f.steps, f.budget_steps, "steps", "steps"
        training = 1.0 / f.seconds_per_step if f.seconds_per_step else None
    elif f.budget_tokens and f.tokens is not None:
        done, budget, unit, label_unit = f.tokens, f.budget_tokens, "tokens", f.token_unit
        training = f.train_tokens_per_s
    else:
        return None
    d = eta(done, budget, recent=recent_pace(f.recent if f.live else None, unit),
            training=Pace(name="training-only", per_s=training, window=REPORT_WINDOW), unit=unit)
    done_text, budget_text = format_count_pair(done, budget)  # 1,100 / 1,150 steps, never 1.1k / 1.1k
    return {"fraction": min(1.0, done / budget), "eta_s": d.value if f.live else None, "pace": pace_of(d),
            "label": f"{done_text} / {budget_text} {label_unit}"}


def _rate_derivation(f: RunFacts) -> dict[str, Any]:
    """Live: the last report window's rate; finished: the whole run's (tokens / training seconds)."""
    pre, since = ("window_", " since the last report") if f.live else ("", "")
    tokens, train_s = (f.window_tokens, f.window_train_s) if f.live else (f.tokens, f.train_s)
    missing = "a report with training time" if f.live and f.train_tokens_per_s is None else None
    if f.tokens is None:
        tokens, missing = None, f.tokens_missing or NO_BATCH_READ
    unit, word = f.token_unit or "samples/tokens", f.token_unit or "tokens"  # a samples run's names say samples
    return Derivation(name=f"train_{word}_per_s", formula=f"{pre}{word} / {pre}train_s", value=f.train_tokens_per_s,
                      unit=f"{unit}/s", missing=missing,
                      inputs=(Input(name=f"{pre}{word}", value=tokens, unit=unit, provenance="counted",
                                    source=f"root module batches{since}"),
                              Input(name=f"{pre}train_s", value=train_s, unit="s", provenance="measured",
                                    source="phase clock: train" + (f",{since}" if since else "")))).to_dict()


def _recent_rate_tile(f: RunFacts, unit: str, short: str) -> dict[str, Any]:
    """The live rate tile: wall-clock rate over the last window of steps, training-only over the same window."""
    r = f.recent
    window = f"last {r.window_s:.0f} s" if r.window_s >= 1 else "first second"
    stalled = getattr(r, "stalled_s", None)  # no step for a while: the window ends now (widget/live_rate.py)
    train = getattr(r, "train_tokens_per_s", None)
    inputs = [Input(name=f"window_{f.token_unit}", value=r.window_tokens, unit=f.token_unit, provenance="counted",
                    source=f"root module batches of the last {r.window_steps} steps"),
              Input(name="window_s", value=r.window_s, unit="s", provenance="measured",
                    source="wall clock from the step before the window to "
                    + (f"now (no step for {stalled:.0f} s)" if stalled is not None else "the last step"))]
    if train is not None:
        inputs.append(Input(name="window_train_s", value=r.window_train_s, unit="s", provenance="measured",
                            source="phase clock: train, between the same two steps"))
    return {
        "id": "throughput", "label": f"session rate ({f'no step for {stalled:.0f} s' if stalled else window})",
        "value": r.tokens_per_s, "unit": unit, "provenance": "measured",
        "sub": (f"training-only {format_rate(train, f'{short}/s')} over the same {window}" if train is not None
                else "wall clock, every phase"),
        "derivation": Derivation(
            name=f"recent_{f.token_unit}_per_s", formula=f"window_{f.token_unit} / window_s"
            + (f"; training-only: window_{f.token_unit} / window_train_s" if train is not None else ""),
            value=r.tokens_per_s, unit=f"{f.token_unit}/s", inputs=tuple(inputs)).to_dict()}


def tiles(f: RunFacts) -> list[dict[str, Any]]:
    """The tiles: step, tokens, training-only vs session rate, loss, memory (RSS, CUDA)."""
    short = "tok" if f.token_unit == "tokens" else f.token_unit or "samples/tokens"
    step_sub = f"of {format_count(f.budget_steps)}" if f.budget_steps else (
        f"{format_seconds(f.seconds_per_step)}/step" if f.seconds_per_step else "")
    out: list[dict[str, Any]] = [
        {"id": "step", "label": "step", "value": f.steps, "unit": "count", "sub": step_sub, "provenance": "counted"},
        {"id": "tokens", "label": f.token_unit or "samples/tokens", "value": f.tokens,
         "unit": "tokens" if f.token_unit == "tokens" else "count",
         "sub": f"of {format_count(f.budget_tokens)}" if f.budget_tokens else "", "provenance": "counted"},
    ]
    if f.tokens is None:  # no batch read: unknown, never 0 (docs/spec.md section 12)
        out[1]["missing"] = f.tokens_missing or NO_BATCH_READ
    rate: dict[str, Any] = {
        "id": "throughput", "label": "training-only rate" + ("" if f.live else " (whole run)"),
        "value": f.train_tokens_per_s, "unit": "tokens/s" if f.token_unit == "tokens" else "samples/s",
        "provenance": "measured",
        "sub": f"session {format_rate(f.session_tokens_per_s, f'{short}/s')}", "derivation": _rate_derivation(f)}
    if f.tokens is None and f.steps:
        rate["missing"] = f.tokens_missing or NO_BATCH_READ
    elif f.train_tokens_per_s is None:
        rate["missing"] = f"the first report (every {f.interval_s:g} s) with training time"
    live_rate = f.live and f.recent is not None and f.tokens is not None
    out.append(_recent_rate_tile(f, rate["unit"], short) if live_rate else rate)
    loss: dict[str, Any] = {"id": "loss", "label": "loss", "value": f.loss_last, "unit": "",
                            "sub": f"min {format_number(f.loss_min)}" if f.loss_min is not None else "",
                            "provenance": "measured"}
    if f.loss_nonfinite is not None:  # said as read, in the alert colour (RunFacts.loss_state)
        loss["text"] = f.loss_nonfinite
    elif f.loss_last is None:
        loss["missing"] = "a loss: return it from the loss module, or tm.emit(train_loss=loss)"
    if f.loss_state is not None:
        loss["alert"] = True
    out.append(loss)
    rss: dict[str, Any] = {"id": "rss", "label": "memory (RSS)", "value": f.rss_bytes, "unit": "bytes",
                           "sub": f"peak {format_bytes(f.rss_peak_bytes)} sampled" if f.rss_peak_bytes else "",
                           "provenance": "measured"}
    if f.rss_bytes is None:  # live with psutil: not read yet (the first frame), never "install psutil"
        rss["missing"] = (f"the first report (every {f.interval_s:g} s)" if f.live and find_spec("psutil")
                          else "psutil (pip install psutil)")
    out.append(rss)
    cuda = f.cuda or {}
    if cuda.get("allocated_bytes") is not None:
        peak = cuda.get("peak_allocated_bytes") or cuda.get("max_allocated_bytes")
        total = cuda.get("device_total_bytes")
        sub = " · ".join(p for p in (f"peak {format_bytes(peak)}" if peak else "",
                                     f"of {format_bytes(total)}" if total else "") if p)
        out.append({"id": "cuda_memory", "label": "CUDA allocated", "value": cuda["allocated_bytes"],
                    "unit": "bytes", "sub": sub, "provenance": "measured"})
    return out


def charts(f: RunFacts) -> list[dict[str, Any]]:
    """Chart specs: loss (step), other step series, throughput and memory (time), then extensions'."""
    losses = list(LOSS_NAMES) + [n for n in f.step_series if "loss" in n and n not in LOSS_NAMES]
    loss_title = _capped_title("loss", len(losses))
    losses = losses[:MAX_CHART_LINES]
    out: list[dict[str, Any]] = [{"id": "loss", "title": loss_title, "x": "step", "unit": "", "series": losses,
                                  "log_y": f.loss_min is not None and f.loss_min > 0,  # early spikes stay readable
                                  **smoothed_spec(f.loss_points, f.steps),  # optim/smoothing.py
                                  "latest": {"train_loss": f.loss_nonfinite or f.loss_last}}]  # the tile's value
    drawn = {n for c in f.extra_charts if isinstance(c, dict) for n in (c.get("series") or ())}  # lr on its log axis
    others = [n for n in f.step_series if "loss" not in n and n not in drawn]
    out.extend({"id": f"series:{name}", "title": name, "x": "step", "unit": "", "series": [name]}
               for name in others[:MAX_SERIES_CHARTS])
    if more := others[MAX_SERIES_CHARTS:]:
        out.append({"id": "series:more", "title": _capped_title("more series", len(more)), "x": "step", "unit": "",
                    "series": more[:MAX_CHART_LINES]})
    if f.token_unit is not None:  # no batch read: no rate to draw (never a line at 0)
        # one window per chart: the tile's pair over the last 10 s where the widget measured it, else the reports'
        # training-only rate (a replay); docs/spec.md section 12
        rates = [RECENT_SERIES, RECENT_TRAIN_SERIES] if f.recent is not None else ["train_tokens_per_s"]
        out.append({"id": "throughput", "title": f"throughput ({f.token_unit}/s)", "x": "time",
                    "unit": "tokens/s" if f.token_unit == "tokens" else "samples/s", "series": rates,
                    "y_range": [0, None]})  # rates are non-negative: autoscale hid the scale
    out.append({"id": "memory", "title": "memory", "x": "time", "unit": "bytes",
                "series": ["rss_bytes", "cuda_allocated_bytes"],
                "y_range": [0, (f.cuda or {}).get("device_total_bytes")]})  # 0 to the device's total
    seen = {c["id"] for c in out}
    out.extend(c for c in f.extra_charts if isinstance(c, dict) and c.get("id") not in seen)
    return out


def _capped_title(title: str, lines: int) -> str:
    """A chart's title, saying how many of its lines are left out and where they are (docs/spec.md section 18)."""
    if lines <= MAX_CHART_LINES:
        return title
    return (f"{title} ({MAX_CHART_LINES} of {lines:,} drawn; every series is in the run log: "
            "tm.load(path).to_pandas())")


def run_rel(run_dir: str | None, cwd: str | None = None) -> str | None:
    """The run folder relative to ``cwd`` (the kernel's folder: the notebook's), or ``None`` outside it: the live
    page joins it to the notebook's path in its URL for its links (js/src/runlinks.ts), so no absolute path is
    saved. No filesystem access beyond the working folder's name."""
    if not run_dir:
        return None
    base = cwd or os.getcwd()
    rel = os.path.relpath(os.path.abspath(os.path.join(base, run_dir)), base)
    return None if rel == ".." or rel.startswith(".." + os.sep) else rel.replace(os.sep, "/")


def _badged_derivation(d: dict[str, Any]) -> dict[str, Any]:
    inputs = [i for i in d.get("inputs") or [] if isinstance(i, dict) and i.get("value") is not None]
    prov = weakest(i.get("provenance") for i in inputs)
    if prov is None:
        return d
    each = ", ".join(f"{i.get('name')} {i.get('provenance')}" for i in inputs)
    return {**d, "provenance": prov, "provenance_note": f"{prov}: the weakest of its inputs ({each})"}


def badge_tiles(tiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Badges only on values (a missing one says why instead); a derived value's is the weakest of its inputs', and
    each derivation says so (docs/spec.md section 5)."""
    out = []
    for tile in tiles:
        t = dict(tile)
        derivs = [d for d in (t.get("derivations") or [t.get("derivation")]) if isinstance(d, dict)]
        if t.get("value") is None and not t.get("text"):
            t.pop("provenance", None)
            why = next((d["missing"] for d in derivs if d.get("missing")), "not measured yet")
            t["missing"] = t.get("missing") or why
        elif derivs:
            badged = [_badged_derivation(d) for d in derivs]
            if (prov := weakest(d.get("provenance") for d in badged if d.get("provenance"))) is not None:
                t["provenance"] = prov
            if t.get("derivation") is not None:
                t["derivation"] = _badged_derivation(t["derivation"])
            if t.get("derivations"):
                t["derivations"] = badged
        out.append(t)
    return out


def phase_bar(phases_s: dict[str, float]) -> dict[str, Any]:
    """The phase bar: each phase's share of the time (phases with time, in ``phases_s``'s order, rounded to 1e-4:
    the bar prints tenths of a percent) and the largest."""
    entries = [(k, float(v)) for k, v in phases_s.items() if isinstance(v, int | float) and 0 < v < math.inf]
    total = sum(v for _, v in entries)
    if total <= 0:
        return {"shares": {}, "top": None}
    top = max(entries, key=lambda kv: kv[1])[0]
    return {"shares": {k: round(v / total, 4) for k, v in entries}, "top": top}


def build_state(f: RunFacts) -> dict[str, Any]:
    """The ``state`` traitlet value (JSON-safe: non-finite floats become null), at revision 0 (the publisher numbers
    the states it sends)."""
    bar = f.progress_bar or progress(f)
    if bar is not None and not f.live:
        bar = {**bar, "eta_s": None}  # a finished run has no ETA, whoever built the bar
    rel = run_rel(f.run_dir)
    phases_s = {k: round(float(v), 3) for k, v in f.phases_s.items()}
    state = {
        "rev": 0, "name": f.name, "status": f.status,
        "loss_state": f.loss_state, "elapsed_s": round(f.elapsed_s, 1),
        # what a saved notebook keeps (outputs, text): relative to the notebook, else the folder's name; never absolute
        "run_dir": rel or (os.path.basename(f.run_dir) if f.run_dir else None), "run_rel": rel,
        "text_line": f.text_line, "step": f.steps, "error": f.error,
        "progress": bar,
        "tiles": badge_tiles(tiles(f) + [t for t in f.extra_tiles if isinstance(t, dict)]),
        "phases_s": phases_s,
        "phase_bar": phase_bar(phases_s),
        "charts": label_charts(charts(f), f.token_unit),
        "panels": [p for p in f.panels if isinstance(p, dict)],
        "warnings": [str(w) for w in f.warnings],
        "markers": place_markers(verdict_markers(f.markers), f.x_map),
        "x_axis": x_axis_state(tokens=f.tokens or 0, token_unit=f.token_unit or "tokens",  # the axis' name
                               mapped=f.x_map is not None and not f.x_map.empty),
        "look": LOOK,
    }
    if f.controls is not None:  # the alerts' sentences show in its banner, not again among the warnings
        state["controls"] = f.controls
        shown = {a.get("sentence") for a in f.controls.get("alerts") or []}
        state["warnings"] = [w for w in state["warnings"] if w not in shown]
    return clean(state)  # the C encoder and decoder round trip takes 1.5-2x as long on a ~10 KB state


def summary_text(state: dict[str, Any]) -> str:
    """One text line for a state: where widgets do not render."""
    where = f"; run folder {state['run_dir']}" if state.get("run_dir") else ""
    return f"trainmeter: {state.get('name')} [{state.get('status')}] {state.get('text_line', '')}{where}"


def save_dashboard(run_dir: Any, state: dict[str, Any]) -> None:
    """Write the final ``state`` to ``run_dir/dashboard.json`` (the live panels, charts and tiles the passport lacks);
    a failure only loses the replay's extras."""
    if run_dir is None:
        return
    with suppress(Exception):
        # no absolute path in the record (it can hold a user name; docs/spec.md section 18): a replay
        # places the run from where it is read
        kept = {k: v for k, v in state.items() if k not in ("run_dir", "run_path", "run_rel")}
        write_file_atomic(Path(run_dir) / DASHBOARD_FILE, json.dumps(kept, separators=(",", ":")))
