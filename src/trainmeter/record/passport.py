"""The run passport: ``passport.json`` (the full record, docs/spec.md section 6) and ``passport.md`` (for a model
card), built from the monitor's state at the end of the run; the environment it ran in (no host name, user or path)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core.context import RunContext
from trainmeter.core.explicit_steps import steps_unknown
from trainmeter.core.provenance import Derivation, Input
from trainmeter.core.text import markdown_text
from trainmeter.core.throughput import NO_RANK_READ, ratio, tokens_missing
from trainmeter.record.runlog import json_lines, write_file_atomic
from trainmeter.sizes import (
    format_bytes,
    format_count,
    format_duration,
    format_integer,
    format_number,
    format_percent,
    format_rate,
    format_seconds,
)

PASSPORT_SCHEMA_VERSION = 1


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def platform_name() -> str:
    """``platform.platform()``; on Linux with glibc built from ``os.uname()`` and ``CS_GNU_LIBC_VERSION`` (microseconds,
    where ``platform.platform()`` scans the interpreter binary for the libc version: tens of milliseconds)."""
    try:
        uname = os.uname()
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return platform.platform()
    name, _, version = libc.partition(" ")
    if uname.sysname != "Linux" or name != "glibc" or not version:
        return platform.platform()
    return f"{uname.sysname}-{uname.release}-{uname.machine}-with-glibc{version}".replace(" ", "_")


@functools.cache
def _host() -> dict[str, Any]:
    """Facts fixed for the life of the process, read once."""
    return {"trainmeter": __version__, "python": platform.python_version(), "platform": platform_name(),
            "cpu": _cpu_model(), "cpu_count": os.cpu_count()}


def describe_environment() -> dict[str, Any]:
    """Python, torch (if already imported), platform and CPU facts; the host's read once per process. Any thread."""
    torch = sys.modules.get("torch")
    torch_version = getattr(torch, "__version__", None)
    cuda_version = None
    cuda_devices: list[str] = []
    if torch is not None:
        with contextlib.suppress(Exception):
            cuda_version = torch.version.cuda
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                cuda_devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    host = _host()
    return {"trainmeter": host["trainmeter"], "python": host["python"],
            "torch": str(torch_version) if torch_version is not None else None, "cuda": cuda_version,
            "cuda_devices": cuda_devices, **{k: host[k] for k in ("platform", "cpu", "cpu_count")}}


def throughput_derivations(*, tokens: int | None, steps: int, train_s: float, elapsed_s: float, unit: str | None,
                           missing: str | None = None) -> list[Derivation]:
    """Whole-run throughput with its inputs (training-only and session denominators); ``tokens`` ``None``: no batch
    was read (``missing`` says why), so no rate (docs/spec.md section 3)."""
    unit = unit or "tokens"
    tok = Input(name="tokens", value=tokens, unit=unit, provenance="counted", source="root module batches")
    train = Input(name="train_s", value=train_s, unit="s", provenance="measured", source="phase clock: train")
    return [
        Derivation(name="train_tokens_per_s", formula="tokens / train_s", value=ratio(tokens, train_s),
                   unit=f"{unit}/s", inputs=(tok, train), missing=missing),
        Derivation(name="session_tokens_per_s", formula="tokens / session_s",
                   value=ratio(tokens, elapsed_s), unit=f"{unit}/s", missing=missing,
                   inputs=(tok, Input(name="session_s", value=elapsed_s, unit="s", provenance="measured",
                                      source="session clock")),),
        Derivation(name="seconds_per_step", formula="train_s / steps",
                   value=ratio(train_s, steps) if steps else None, unit="s",
                   inputs=(train, Input(name="steps", value=steps, unit="1", provenance="counted",
                                        source="optimizer step hook"))),
    ]


RUN_ROOT_RECORDED = ".."  # the run root as the record says it: the run folder's parent (docs/spec.md section 18)


def record_options(options: Any) -> dict[str, Any]:
    """The options as the record keeps them: no absolute path (it can hold a user name), the run root relative."""
    out = {**options.to_dict(), "run_root": RUN_ROOT_RECORDED}
    if getattr(options, "resume", None) is not None:  # the parent's folder, relative (docs/spec.md section 22)
        out["resume"] = relative_to_run(options.resume, options.run_root)
    return out


def relative_to_run(parent: Path, run_root: Path) -> str:
    """The parent's folder as a run folder under ``run_root`` reaches it (the record holds no absolute path)."""
    try:
        return Path(os.path.relpath(parent, Path(os.path.abspath(run_root)) / "run")).as_posix()
    except ValueError:  # another drive: its folder name only
        return f"../{parent.name}"


def build_passport(m: RunContext) -> dict[str, Any]:
    """Return the passport dict of a finished (or finishing) run."""
    phases_s = dict(m.phases.totals_s)
    elapsed_s = m.elapsed_s()
    missing = tokens_missing(m)  # no batch read: tokens, rates null, never 0 (docs/spec.md section 6)
    tokens = None if missing else m.tokens
    derivations = throughput_derivations(tokens=tokens, steps=m.steps, train_s=phases_s.get("train", 0.0),
                                         elapsed_s=elapsed_s, unit=m.token_unit, missing=missing)
    memory = {"rss_peak_bytes": None, "cuda": None} if m.memory is None else {
        "rss_peak_bytes": m.memory.rss_peak_bytes, "rss_bytes": m.memory.rss_bytes, "cuda": m.memory.cuda}
    passport: dict[str, Any] = {
        "schema_version": PASSPORT_SCHEMA_VERSION,
        "name": m.options.name,
        "status": m.status,
        "error": m.error,
        "exit_code": getattr(m, "exit_code", None),
        "end_gave_up": list(getattr(m, "end_gave_up", [])),
        "started_at": m.started_at,
        "ended_at": m.ended_at,
        "elapsed_s": elapsed_s,
        "steps": m.steps,
        "tokens": tokens,
        "token_unit": m.token_unit,
        "tokens_missing": missing,
        "phases_s": phases_s,
        "goodput": ratio(phases_s.get("train", 0.0), elapsed_s),
        "throughput": {d.name: d.value for d in derivations},  # train_tokens_per_s, session_..., seconds_per_step
        "memory": memory,
        "params": dict(m.params),
        "series": {name: s.stats().to_dict() for name, s in sorted(m.series.items())},
        "series_info": dict(getattr(m, "series_info", {})),
        "options": record_options(m.options),
        "environment": describe_environment(),
        "derivations": [d.to_dict() for d in derivations],
        "warnings": list(m.warnings),
        "warnings_suppressed": getattr(m, "warnings_suppressed", 0),
        "series_dropped": {"count": getattr(m, "series_dropped", 0),
                           "names": list(getattr(m, "series_dropped_names", [])),
                           "max_series": getattr(m.options, "max_series", None)},
        "emits_dropped": getattr(m, "queue_dropped", 0),
        "emits_ignored": getattr(m, "emits_ignored", 0),
        "lanes": [lane.to_dict() for lane in m.lane_records()] if hasattr(m, "lane_records") else [],
    }
    if (controls := getattr(m, "controls", None)) is not None:  # stopped_by/stopped_at_step, checkpoints
        passport.update(controls.passport_fields())
    m.passport_sections(passport)  # each extension's section under its name, and its derivations
    if (launch := _launch(passport)) and not m.steps:  # the parent trained nothing itself: it speaks for its launch
        _speak_for_launch(passport, launch, elapsed_s)
    if isinstance(time_section := passport.get("time"), dict) and "checkpoints" in time_section:  # one per checkpoint
        ours = passport.get("checkpoints") or []  # tm.checkpoint() and the widget's (core/controls.py)
        passport["checkpoints"] = sorted([*time_section.pop("checkpoints"), *ours],
                                         key=lambda c: c.get("step") or 0 if isinstance(c, dict) else 0)
    if steps_unknown(m):  # backward seen, no step it knows: no count, no goodput (docs/spec.md section 11)
        passport["steps_unknown"] = True
        passport["goodput"] = None
    return passport


def _launch(p: dict[str, Any]) -> dict[str, Any] | None:
    """The ``distributed`` section of a parent whose ranks were recorded (its passport speaks for the launch)."""
    section = p.get("distributed")
    return section if isinstance(section, dict) and section.get("role") == "launch" else None


def _speak_for_launch(p: dict[str, Any], launch: dict[str, Any], elapsed_s: float) -> None:
    """A parent that trained nothing: its steps, tokens and unit are its launch's (the ranks'), its session rate the
    launch's over its session; no goodput, training-only rate or step time of its own (docs/spec.md section 19)."""
    unit, tokens = launch.get("token_unit") or "tokens", launch.get("global_tokens")
    rate = Derivation(name="session_tokens_per_s", formula="global_tokens / session_s", unit=f"{unit}/s",
                      value=ratio(tokens, elapsed_s), missing=None if tokens is not None else NO_RANK_READ,
                      inputs=(Input(name="global_tokens", value=tokens, unit=unit, provenance="counted",
                                    source="distributed: sum over ranks"),
                              Input(name="session_s", value=elapsed_s, unit="s", provenance="measured",
                                    source="session clock")))
    launch["parent_trained"] = False
    p.update(steps=launch.get("global_steps"), tokens=tokens, token_unit=launch.get("token_unit"), goodput=None,
             tokens_missing=None if tokens is not None else NO_RANK_READ,
             throughput={"train_tokens_per_s": None, "session_tokens_per_s": rate.value, "seconds_per_step": None})
    p["derivations"] = [d for d in p["derivations"] if d.get("name") not in p["throughput"]] + [rate.to_dict()]


def _for_launch(p: dict[str, Any]) -> dict[str, Any] | None:
    """The ``distributed`` section of a parent that trained nothing and speaks for its launch (an older passport's:
    0 steps of its own), else ``None``."""
    launch = _launch(p)
    return launch if launch is not None and (launch.get("parent_trained") is False or not p.get("steps")) else None


def headline(p: dict[str, Any]) -> str:
    """``N steps, T tokens, R tokens/s (session)`` of a passport for the closing line: a parent that trained nothing
    gives its launch's global figures in the ranks' unit (docs/spec.md section 7)."""
    launch = _for_launch(p)
    unit, rate = p.get("token_unit", "tokens"), (p.get("throughput") or {}).get("session_tokens_per_s")
    tokens = p.get("tokens")  # none read: never 0 (docs/spec.md section 6)
    count = f"{format_count(tokens)} {unit}" if tokens is not None and unit else \
        f"samples/tokens — ({p.get('tokens_missing') or 'no batch was read'})"
    return (f"{p.get('steps')} steps" + (f" (global, over {launch.get('ranks_recorded')} rank(s))" if launch else "")
            + f", {count}"
            + (f", {format_rate(rate, f'{unit}/s')} ({'all ranks, ' if launch else ''}session)" if rate else ""))


def _steps_line(p: dict[str, Any]) -> str:
    if (launch := _for_launch(p)) is not None:
        unit, tokens = launch.get("token_unit") or "samples/tokens", launch.get("global_tokens")
        return (f"- Steps: {format_integer(launch.get('global_steps'))} (global, over "
                f"{format_integer(launch.get('ranks_recorded'))} rank(s) of world size "
                f"{format_integer(launch.get('world_size'))}); {unit}: "
                + (f"{format_integer(tokens)} (sum over ranks)" if tokens is not None else f"— ({NO_RANK_READ})"))
    unit = p.get("token_unit", "tokens") or "samples/tokens"  # null: no batch read (no key: an older passport's)
    if p.get("steps_unknown"):
        return (f"- Steps: unknown (backward calls with no optimizer step trainmeter knows: call tm.step() after "
                f"each update); {unit}: unknown")
    if p.get("tokens") is None:
        return f"- Steps: {format_integer(p['steps'])}; {unit}: — ({markdown_text(p.get('tokens_missing'))})"
    return f"- Steps: {format_integer(p['steps'])}; {unit}: {format_integer(p['tokens'])}"


def _throughput_line(p: dict[str, Any]) -> str:
    tp, unit = p.get("throughput") or {}, p.get("token_unit", "tokens")
    if _for_launch(p) is not None:
        label = f"{unit or 'samples/tokens'}/s"
        return f"- Throughput: {format_rate(tp.get('session_tokens_per_s'), label)} over all ranks (global / this session)"
    if unit is None:  # no batch read: the rates are unknown, the step time is not
        return (f"- Throughput: — (samples/tokens unknown, see above); "
                f"{format_seconds(tp.get('seconds_per_step'))} per step training-only")
    return (f"- Throughput: {format_rate(tp.get('train_tokens_per_s'), f'{unit}/s')} training-only, "
            f"{format_rate(tp.get('session_tokens_per_s'), f'{unit}/s')} session")


def render_markdown(p: dict[str, Any]) -> str:
    """Return ``passport.md``: a short summary to paste into a model card (numbers as the widget shows them)."""
    unit = p.get("token_unit", "tokens") or "samples/tokens"
    lines = [
        f"## Training run: {markdown_text(p['name'])}",
        "",
        f"- Status: **{markdown_text(p['status'])}**" + (f" ({markdown_text(p['error'])})" if p.get("error") else ""),
        f"- Started {p.get('started_at')}, ended {p.get('ended_at')} (UTC); session {format_duration(p.get('elapsed_s'))}",
        _steps_line(p),
    ]
    lines += _lanes_table(p.get("lanes"), unit)
    lines += [f"- Launch: {markdown_text(note)}" for note in (_launch(p) or {}).get("notes") or []]
    if trained := (p.get("params") or {}).get("trained"):
        lines.append(f"- Trained parameters: {format_integer(trained)}")
    lines.append(_throughput_line(p))
    if (goodput := p.get("goodput")) is not None:
        lines.append(f"- Goodput (training time / session time): {format_percent(goodput)}")
    if phases := {k: v for k, v in (p.get("phases_s") or {}).items() if v > 0}:
        lines.append("- Time: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in phases.items()))
    series = p.get("series") or {}
    for name in ("train_loss", "val_loss", "eval_loss", "valid_loss"):
        if name in series and series[name].get("last") is not None:
            s = series[name]
            lines.append(f"- {name}: last {format_number(s['last'])}, min {format_number(s['min'])} "
                         f"({s['count']} points)")
    if rss_peak := (p.get("memory") or {}).get("rss_peak_bytes"):
        lines.append(f"- Host memory (RSS) peak at sampling points: {format_bytes(rss_peak)}")
    # the wings' lines: lineage (a resumed run, docs/spec.md section 22), the compute card, energy's line on it
    for key, before in (("lineage", []), ("compute", [""]), ("energy", [])):
        section = p.get(key)
        if isinstance(section, dict) and section.get("markdown"):
            lines += [*before, section["markdown"]]
    lines += [f"- Verdict: {v['sentence']}" for v in _dicts(p.get("verdicts")) if v.get("sentence")]
    gpu = p.get("gpu") if isinstance(p.get("gpu"), dict) else {}
    for index, check in sorted((gpu.get("crosscheck") or {}).items()):  # docs/spec.md section 8
        if isinstance(check, dict) and check.get("verdict"):
            lines.append(f"- GPU {index}, formula vs hardware: {markdown_text(check['sentence'])}")
    if p.get("stopped_by"):
        lanes = [lane for lane in _dicts(p.get("lanes")) if lane.get("stopped_at_step")]
        at = ", ".join(f"{lane.get('lane')} at {lane['stopped_at_step']}" for lane in lanes)  # each lane's own step
        where = f"; lanes {at}" if len(lanes) > 1 else ""  # docs/spec.md section 21
        lines.append(f"- Stopped by {markdown_text(p['stopped_by'])} after step {p.get('stopped_at_step')}{where}")
    for ckpt in _dicts(p.get("checkpoints")):
        where = ckpt.get("path") or f"a stream, no file: {ckpt.get('note') or 'not seen'}"  # never its repr
        lines.append(f"- Checkpoint at step {ckpt.get('step')}: {markdown_text(where)} "
                     f"({format_bytes(ckpt.get('bytes'))}, {format_seconds(ckpt.get('seconds'))}, "
                     f"{markdown_text(ckpt.get('source'))})"
                     + (f": {markdown_text(ckpt['recovery'])}" if ckpt.get("recovery") else ""))
    lines += [f"- Alert: {markdown_text(a['sentence'])}" for a in _dicts(p.get("alerts")) if a.get("sentence")]
    env, record = p.get("environment") or {}, p.get("record") or {}
    if record and not record.get("complete", True):
        lines.append(f"- Record incomplete: {markdown_text(record.get('summary') or 'see passport.json record')}")
    lines += ["", f"Environment: Python {markdown_text(env.get('python'))}, torch {markdown_text(env.get('torch'))}, "
                  f"{markdown_text(env.get('cpu'))}",
              "", f"_Recorded by trainmeter {env.get('trainmeter')}; full record in passport.json._", ""]
    return "\n".join(lines)


def _dicts(items: Any) -> list[dict[str, Any]]:
    """The dicts in a passport's list (a damaged or older one may hold other things)."""
    return [item for item in items or [] if isinstance(item, dict)]


def _lanes_table(lanes: Any, unit: str) -> list[str]:
    """A short table of the lanes when several threads trained (docs/spec.md section 2, "Threads")."""
    if not isinstance(lanes, list) or len(lanes) < 2:
        return []
    rows = ["", "| lane | thread | model | optimizer | steps | " + markdown_text(unit) + " | s/step | loss series |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lane in _dicts(lanes):
        step_s = lane.get("step_s")
        rows.append("| " + " | ".join([
            str(lane.get("lane")), markdown_text(lane.get("thread")), markdown_text(lane.get("model") or "-"),
            markdown_text(lane.get("optimizer") or "-"), format_integer(lane.get("steps")),
            format_integer(lane.get("tokens")), format_seconds(step_s) if isinstance(step_s, float) else "-",
            markdown_text(lane.get("loss_series"))]) + " |")
    return rows + [""]


RECORD_FILES = ("events.jsonl", "curves.json", "passport.md", "dashboard.json")  # a passport's `files` (section 6)


def write_passport(m: RunContext, record: dict[str, Any],
                   before_json: Callable[[], None] | None = None) -> dict[str, Any]:
    """Write ``passport.md``, then ``before_json()`` (the dashboard, the log's end record), then ``passport.json``
    last, with the record section and ``files``: the record's files in the folder by then, so a kill between the
    files is seen on read (docs/spec.md section 6). Returns the passport as written. ``OSError`` when a file cannot
    be written (none left half-written)."""
    assert m.run_dir is not None
    passport = {**build_passport(m), "record": record}
    text = json_lines(passport)  # json's C encoder, one key a line (docs/spec.md section 20)
    written = json.loads(text)
    write_file_atomic(m.run_dir / "passport.md", render_markdown(written))
    if before_json is not None:
        before_json()
    written["files"] = [name for name in RECORD_FILES if (m.run_dir / name).is_file()]
    write_file_atomic(m.run_dir / "passport.json", f"{text[:-2]},\n  \"files\": {json.dumps(written['files'])}\n}}\n")
    return written
