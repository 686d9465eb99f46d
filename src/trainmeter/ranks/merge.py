"""Merged figures of a launch from its seats' files: per-rank summaries, the ``distributed`` section, the
launch's passport when no parent owns it, and the ranks panel and tiles of a followed launch (docs/spec.md section
19; docs/protocol.md panel and tile).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trainmeter.compute.flops import mfu_conventions
from trainmeter.core.provenance import Derivation, Input, derived_provenance
from trainmeter.core.throughput import NO_RANK_READ
from trainmeter.ranks.follow import RunFollower, rank_order
from trainmeter.ranks.launch_mfu import RankCompute, launch_ladders, launch_mfu, launch_mfu_figures, rank_compute
from trainmeter.ranks.seating import seats, this_node
from trainmeter.ranks.stragglers import score_ranks, with_repeats
from trainmeter.record.events import LOG_FILE, head, last_of_kinds, tail
from trainmeter.record.runlog import clean, write_file_atomic
from trainmeter.record.safe_read import read_passport
from trainmeter.sizes import format_integer, format_percent, format_seconds

WINDOW_TAIL_BYTES = 4 * 1024 * 1024  # the tail of a rank's log read for its report windows


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSummary:
    """One seat of a launch, as its files say: the keys of ``ranks[]`` (docs/spec.md section 19), and ``compute`` and
    ``node_gpu`` (its passport's ``gpu`` section), which ``ranks[]`` leaves out."""

    seat: str
    rank: int | None
    local_rank: int | None = None
    node: str | None = None
    world_size: int | None = None
    backend: str | None = None
    status: str = "unfinished"
    steps: int = 0
    tokens: int = 0
    token_unit: str | None = "tokens"  # what its batches held; None: it read none (its tokens unknown, never 0)
    elapsed_s: float | None = None
    seconds_per_step: float | None = None
    peak_memory_bytes: int | None = None
    data_wait_s: float | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    device: dict[str, Any] | None = None
    mfu: float | None = None
    mfu_missing: str | None = None
    first_step_counted: bool = True
    compute: RankCompute | None = field(default=None, repr=False)
    node_gpu: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (one entry of ``distributed.ranks``: the fields shown in its repr)."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.repr}
        return {**out, "tokens": self.tokens if self.token_unit else None}

    @property
    def label(self) -> str:
        """``rank 1``, or the seat name for a child with no rank."""
        return f"rank {self.rank}" if self.rank is not None else self.seat

    @property
    def key(self) -> int | str:
        """Its rank, else its seat name (the straggler scores' key)."""
        return self.rank if self.rank is not None else self.seat


FIRST_STEP_MISSED = "counted from step 2"  # the probes' tokens_per_step note (core/loss_capture.py)


def read_seat(seat_dir: Path) -> RankSummary:
    """Summarise one seat from its passport, or from the tail of its log when it has none."""
    ident: dict[str, Any] = next((dict(r) for r in head(seat_dir / LOG_FILE, 1, kinds=("rank",))), {})
    base = {"seat": seat_dir.name, **{key: ident.get(key) for key in ("rank", "local_rank", "node", "world_size")}}
    label = f"rank {base['rank']}" if base["rank"] is not None else seat_dir.name

    def figures(rec: dict[str, Any], steps_key: str) -> dict[str, Any]:
        section, memory = rec.get("distributed") or {}, rec.get("memory") or {}
        cuda = memory.get("cuda") or {}
        peak = next((cuda[k] for k in ("max_allocated_bytes", "peak_allocated_bytes", "allocated_bytes")
                     if cuda.get(k) is not None), memory.get("rss_peak_bytes"))
        return {**base, "backend": section.get("backend") or ident.get("backend"),
                "device": section.get("device") or ident.get("device"), "steps": int(rec.get(steps_key) or 0),
                "tokens": int(rec.get("tokens") or 0), "token_unit": rec.get("token_unit", "tokens"),
                "elapsed_s": rec.get("elapsed_s"),
                "seconds_per_step": (rec.get("throughput") or {}).get("seconds_per_step"),
                "peak_memory_bytes": int(peak) if peak is not None else None,
                "data_wait_s": (rec.get("phases_s") or {}).get("data_wait"),
                "timing": dict(section.get("timing") or {}), "compute": rank_compute(label, rec)}

    p = load_passport(seat_dir / "passport.json")  # missing or damaged: summarised from its log
    if p:
        compute = p.get("compute") or {}
        mfu, key = compute.get("mfu") or {}, compute.get("convention") or "hf"  # its own, under its convention
        missing = compute.get("mfu_missing") or (f"no MFU under {key}" if mfu else "no MFU recorded")
        gpu, tokens_info = p.get("gpu"), (p.get("series_info") or {}).get("tokens_per_step")
        return RankSummary(**figures(p, "steps"), mfu=None if mfu.get(key) is None else float(mfu[key]),
                           mfu_missing=missing if mfu.get(key) is None else None,
                           node_gpu=gpu if isinstance(gpu, dict) and gpu.get("devices") else None,
                           status=str(p.get("status") or "unfinished"),
                           error="; ".join(str(e) for e in (p.get("damaged"), p.get("error")) if e) or None,
                           first_step_counted=not isinstance(tokens_info, dict)
                           or FIRST_STEP_MISSED not in str(tokens_info.get("note") or ""))
    last = last_of_kinds(seat_dir / LOG_FILE, ("interval", "end"))
    end = last.get("end") or {}
    status = str(end.get("status") or "unfinished")
    if status == "unfinished" and ident.get("node") == this_node() and not process_alive(ident.get("pid")):
        status = "died"  # its process is gone and it wrote no end: killed (SIGKILL, out of memory)
    return RankSummary(**figures(last.get("interval") or {}, "step"), status=status, error=end.get("error"))


def process_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this node (``True`` when unknown)."""
    try:
        if isinstance(pid, int) and pid > 0:
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def read_launch(launch_dir: Path) -> list[RankSummary]:
    return sorted((read_seat(p) for p in seats(launch_dir)), key=rank_order)


def window_history(seat_dir: Path) -> list[dict[str, Any]]:
    """The rank's report windows (``distributed.timing.window`` of its interval records, last 4 MiB of its log)."""
    records = tail(seat_dir / LOG_FILE, max_bytes=WINDOW_TAIL_BYTES, kinds=("interval",))
    return [w for r in records if (w := ((r.get("distributed") or {}).get("timing") or {}).get("window"))]


def distributed_section(ranks: list[RankSummary], *, launch_dir: Path | None = None,
                        convention: str | None = None) -> dict[str, Any]:
    """The passport's ``distributed`` section for a launch; ``launch_dir``: also count each rank's straggler windows.
    Tokens are in the ranks' unit (the first that read a batch); ``None`` when none did (docs/spec.md section 19)."""
    token_unit = next((r.token_unit for r in ranks if r.token_unit), None)
    world_size = max((r.world_size for r in ranks if r.world_size), default=len(ranks))
    nodes = sorted({r.node for r in ranks if r.node})
    backends = sorted({r.backend for r in ranks if r.backend})
    steps = [r.steps for r in ranks]
    together = len(set(steps)) <= 1
    global_steps = max(steps) if steps else 0
    global_tokens = sum(r.tokens for r in ranks if r.token_unit) if token_unit else None
    derivations = [
        Derivation(name="global_steps", formula="max over ranks of steps (ranks step together under DDP/FSDP)",
                   value=global_steps, unit="1", inputs=tuple(Input(
                       name=f"steps[{r.seat}]", value=r.steps, unit="1", provenance="counted",
                       source=f"{r.seat}: optimizer step hook") for r in ranks)),
        Derivation(name="global_tokens", formula="sum over ranks of tokens", value=global_tokens,
                   unit=token_unit or "tokens", missing=None if token_unit else NO_RANK_READ, inputs=tuple(Input(
                       name=f"tokens[{r.seat}]", value=r.tokens if r.token_unit else None, unit=token_unit or "tokens",
                       provenance="counted", source=f"{r.seat}: root module batches") for r in ranks)),
    ]
    ranked = {r.rank for r in ranks if r.rank is not None}
    # children with no rank (proc-<pid>: a subprocess of a cell) are not a world: none of them is missing
    missing = sorted(set(range(world_size)) - ranked) if ranked else []
    if not ranked:
        world_size = max(world_size, len(ranks))  # one device per child process
    waits = {r.key: r.data_wait_s / r.elapsed_s for r in ranks if r.data_wait_s is not None and r.elapsed_s}
    report = score_ranks({r.key: r.timing for r in ranks if r.timing}, waits)
    if report is not None and launch_dir is not None:
        report = with_repeats(report, {r.key: window_history(launch_dir / r.seat) for r in ranks})
    notes = [] if together else [f"ranks did not step together: steps range {min(steps)}-{max(steps)}; "
                                 "global_steps is the most"]
    for r in ranks:
        if r.status != "completed":
            error = (r.error or "").strip().splitlines()
            notes.append(f"{r.seat} {r.status} at step {r.steps}" + (f" ({error[0][:160]})" if error else ""))
    if missing:
        notes.append(f"no record from rank(s) {', '.join(map(str, missing))} of world size {world_size}")
    late = [r.label for r in ranks if not r.first_step_counted]
    if late:
        notes.append(f"global {token_unit} leave out the first step of {', '.join(late)}: its optimizer was built "
                     "before trainmeter was armed there, so its record starts at its first optimizer step, after "
                     "that step's batches")
    if convention is None:
        convention = next((r.compute.convention for r in ranks if r.compute is not None and r.compute.convention), None)
    mfu = launch_mfu_figures([r.compute or RankCompute(label=r.label, tokens=r.tokens) for r in ranks],
                             world_size, convention, missing)
    derivations += mfu.pop("derivations")
    ladder = launch_ladders(ranks, {})  # a parent adds its own node's (ranks/extension.py)
    return {"world_size": world_size, "ranks_recorded": len(ranks), "nodes": len(nodes), "node_names": nodes,
            "backend": backends[0] if len(backends) == 1 else (backends or None), "steps_together": together,
            "global_steps": global_steps, "global_tokens": global_tokens, "token_unit": token_unit,
            "ranks": [r.to_dict() for r in ranks], "stragglers": report.to_dict() if report is not None else None,
            **mfu, "gpu_ladder": ladder, "notes": notes, "derivations": [d.to_dict() for d in derivations]}


def write_launch_passport(launch_dir: Path, name: str) -> dict[str, Any]:
    """Write ``passport.json``/``passport.md`` of a launch without a parent; return the passport. Its status: the
    first bad status of a rank, else ``completed`` when every rank of the world completed, else ``unfinished``."""
    ranks = read_launch(launch_dir)
    section = distributed_section(ranks, launch_dir=launch_dir)
    passports = [load_passport(launch_dir / r.seat / "passport.json") for r in ranks]
    statuses = [r.status for r in ranks]
    done = len(ranks) >= section["world_size"] and all(s == "completed" for s in statuses)
    status = next((s for s in ("failed", "died", "interrupted", "terminated", "damaged") if s in statuses),
                  "completed" if done else "unfinished")
    passport = {"schema_version": 1, "name": name, "status": status, "error": None,
                "started_at": min((p["started_at"] for p in passports if p.get("started_at")), default=None),
                "ended_at": max((p["ended_at"] for p in passports if p.get("ended_at")), default=None),
                "steps": section["global_steps"], "tokens": section["global_tokens"],
                "token_unit": section["token_unit"],
                "distributed": section, "derivations": list(section["derivations"]), "warnings": list(section["notes"])}
    write_file_atomic(launch_dir / "passport.json", json.dumps(clean(passport), indent=2) + "\n")  # under the lock
    (launch_dir / "passport.md").write_text(render_markdown(passport), encoding="utf-8")
    return passport


def load_passport(path: Path) -> dict[str, Any]:
    """A passport read back with its ``files`` checked (record/safe_read.py ``read_passport``: a file it lists that
    the folder lacks makes it ``damaged``, ``incomplete: passport.md missing``), or ``{}`` when missing or damaged."""
    try:
        return read_passport(path.parent)
    except OSError:  # missing, or damaged (Damaged)
        return {}


def render_markdown(p: dict[str, Any]) -> str:
    """A short ``passport.md`` of a launch."""
    d = p["distributed"]
    lines = [f"## Training run: {p['name']} ({d['world_size']} ranks on {d['nodes']} node(s))", "",
             f"- Status: **{p['status']}**",
             f"- Global steps: {format_integer(d['global_steps'])}; {d['token_unit'] or 'samples/tokens'}: "
             + (f"{format_integer(d['global_tokens'])} (sum over ranks)" if d['global_tokens'] is not None
                else f"— ({NO_RANK_READ})")]
    mfu = {k: v for k, v in (d.get("mfu_session") or {}).items() if v is not None}
    if mfu:
        lines.append(f"- MFU over all {d['mfu_devices']} devices (wall clock): "
                     + ", ".join(f"`{k}` {format_percent(v)}" for k, v in mfu.items()))
    elif d.get("mfu_missing"):
        lines.append(f"- MFU over all ranks not shown: {d['mfu_missing']}")
    lines += [f"- rank {row['rank']} on GPU {row['index']} ({row['uuid']}): {row['sentence']}"
              for row in (d.get("gpu_ladder") or {}).get("ranks") or []]
    if d.get("stragglers"):
        lines.append(f"- Stragglers: {d['stragglers']['verdict']}")
    lines += [f"- {note}" for note in d.get("notes") or []]
    lines += ["", "_Recorded by trainmeter; full record in passport.json and rank-*/._", ""]
    return "\n".join(lines)


def after_rank_finished(seat: Any) -> None:
    """Called by a rank's record after its passport: merge the launch's passport when no parent owns it."""
    if seat.parent_pid is not None:
        return
    with (seat.launch_dir / ".merge.lock").open("a") as lock:
        with contextlib.suppress(ImportError):  # not POSIX: merged without the lock
            import fcntl

            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released as the file closes
        name = load_passport(seat.dir / "passport.json").get("name") or seat.launch_dir.name
        write_launch_passport(seat.launch_dir, str(name))


STALE_S = 60.0


def ranks_panel(follower: RunFollower, now_s: float | None = None) -> dict[str, Any] | None:
    """The panel dict, or ``None`` before any rank wrote a record."""
    ranks = follower.ranks()
    if not ranks:
        return None
    now = time.time() if now_s is None else now_s
    rows = []
    for r in ranks:
        interval = r.interval or {}
        status = r.status
        if status == "running" and r.node == this_node() and not process_alive(r.pid):
            status = f"died at step {r.steps}"
        elif status == "running" and r.updated_s and now - r.updated_s > STALE_S:
            status = f"silent for {now - r.updated_s:.0f} s"
        sps = (interval.get("throughput") or {}).get("seconds_per_step")
        note = f"{status}; {format_seconds(sps)}/step" if sps else status  # as the step tile
        device = (interval.get("distributed") or {}).get("device") or {}
        if device.get("uuid"):
            note += f"; {device['uuid']}"  # its GPU (the merged passport has its ladder)
        rows.append({"label": r.label, "value": r.steps, "unit": "steps", "provenance": "counted", "note": note})
    conv, world, d = launch_mfu_now(ranks)
    rows.append({"label": f"MFU, all ranks ({conv}, {world} devices)", "value": d.value, "unit": "fraction",
                 "provenance": derived_provenance(d),
                 "note": d.missing if d.value is None else "F x global tokens / wall s / (devices x peak)"})
    report = score_ranks({r.rank if r.rank is not None else r.seat: t for r in ranks
                          if (t := ((r.interval or {}).get("distributed") or {}).get("timing"))})
    note = report.verdict if report is not None else "straggler scores need two ranks with timed steps"
    return {"id": "ranks", "title": f"Ranks ({len(ranks)})", "rows": rows, "note": note}


def launch_mfu_now(ranks: list[Any]) -> tuple[str, int, Any]:
    """``(convention, world size, Derivation)``: the launch's MFU so far over the wall clock, devices = world size,
    from each rank's latest interval record."""
    inputs = [rank_compute(r.label, r.interval or {}) for r in ranks]
    world = max([int(r.world_size) for r in ranks if r.world_size] + [len(ranks)])
    missing_ranks = sorted(set(range(world)) - {r.rank for r in ranks})
    convention = next((c.convention for c in inputs if c.convention), None)
    conv = (mfu_conventions((c for r in inputs for c in r.flops_per_token), convention) or ["hf"])[0]
    return conv, world, launch_mfu(inputs, world, conv, pace="session", missing_ranks=missing_ranks)


def launch_mfu_tile(ranks: list[Any]) -> dict[str, Any]:
    """The header tile of the launch's MFU (docs/protocol.md tile) once a rank reported."""
    conv, world, d = launch_mfu_now(ranks)
    return {"id": "mfu_ranks", "label": f"MFU, all ranks ({conv})", "value": d.value, "unit": "fraction",
            "provenance": derived_provenance(d), "derivation": d.to_dict(), "sub": f"{world} devices; wall clock",
            **({"missing": d.missing} if d.value is None else {})}


def launch_tokens_tile(ranks: list[Any], token_unit: str = "tokens") -> dict[str, Any] | None:
    """The launch's tokens over every rank, each at its latest report (the ``tokens`` tile of a launch followed
    without a parent, as the merged passport's ``global_tokens``); ``None`` with fewer than two ranks."""
    if len(ranks) < 2:
        return None
    total = sum(int(r.tokens) for r in ranks)
    inputs = [Input(name=f"{r.seat}.tokens", value=int(r.tokens), unit=token_unit, provenance="counted") for r in ranks]
    d = Derivation(name="global_tokens", formula="sum over ranks of tokens (each at its latest report)",
                   value=total, unit=token_unit, inputs=inputs)
    return {"id": "tokens", "label": f"{token_unit}, all ranks", "value": total, "unit": token_unit,
            "provenance": "counted", "derivation": d.to_dict(),
            "sub": f"{len(ranks)} ranks; max step {max(int(r.steps) for r in ranks):,}"}
