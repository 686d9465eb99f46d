"""The ranks panel: one row per rank from a :class:`~trainmeter.ranks.follow.RunFollower` (docs/protocol.md panel)."""

from __future__ import annotations

import time
from typing import Any

from trainmeter.core.provenance import Derivation, Input, derived_provenance
from trainmeter.ranks.follow import RunFollower
from trainmeter.ranks.identity import this_node
from trainmeter.ranks.launch_mfu import conventions, launch_mfu, rank_compute_from_interval
from trainmeter.ranks.merge import process_alive
from trainmeter.ranks.stragglers import score_ranks
from trainmeter.sizes import format_seconds

STALE_S = 60.0


def ranks_panel(follower: RunFollower, now_s: float | None = None) -> dict[str, Any] | None:
    """The panel dict, or ``None`` before any rank wrote a record."""
    ranks = follower.ranks()
    if not ranks:
        return None
    now = time.time() if now_s is None else now_s
    rows = []
    timings: dict[int | str, dict[str, Any]] = {}
    for r in ranks:
        interval = r.interval or {}
        fields = interval.get("distributed") or {}
        if fields.get("timing"):
            timings[r.rank if r.rank is not None else r.seat] = fields["timing"]
        status = r.status
        if status == "running" and r.node == this_node() and not process_alive(r.pid):
            status = f"died at step {r.steps}"
        elif status == "running" and r.updated_s and now - r.updated_s > STALE_S:
            status = f"silent for {now - r.updated_s:.0f} s"
        sps = (interval.get("throughput") or {}).get("seconds_per_step")
        note = f"{status}; {format_seconds(sps)}/step" if sps else status  # as the step tile
        device = fields.get("device") or {}
        if device.get("uuid"):
            note += f"; {device['uuid']}"  # its GPU (the merged passport has its ladder)
        rows.append({"label": r.label, "value": r.steps, "unit": "steps", "provenance": "counted", "note": note})
    conv, world, d = launch_mfu_now(ranks)
    rows.append({"label": f"MFU, all ranks ({conv}, {world} devices)", "value": d.value, "unit": "fraction",
                 "provenance": derived_provenance(d),
                 "note": d.missing if d.value is None else "F x global tokens / wall s / (devices x peak)"})
    report = score_ranks(timings)
    note = report.verdict if report is not None else "straggler scores need two ranks with timed steps"
    return {"id": "ranks", "title": f"Ranks ({len(ranks)})", "rows": rows, "note": note}


def launch_mfu_now(ranks: list[Any]) -> tuple[str, int, Any]:
    """``(convention, world size, Derivation)``: the launch's MFU so far over the wall clock, devices = world size,
    from each rank's latest interval record."""
    inputs = [rank_compute_from_interval(r.label, r.interval or {}) for r in ranks]
    world = max([int(r.world_size) for r in ranks if r.world_size] + [len(ranks)])
    seen = {r.rank for r in ranks if r.rank is not None}
    missing_ranks = sorted(set(range(world)) - seen)
    convention = next((c.convention for c in inputs if c.convention), None)
    conv = (conventions(inputs, convention) or ["hf"])[0]
    return conv, world, launch_mfu(inputs, world, conv, pace="session", missing_ranks=missing_ranks)


def launch_mfu_tile(ranks: list[Any]) -> dict[str, Any] | None:
    """The header tile of the launch's MFU (docs/protocol.md tile), or ``None`` before any rank reported."""
    if not ranks:
        return None
    conv, world, d = launch_mfu_now(ranks)
    tile: dict[str, Any] = {"id": "mfu_ranks", "label": f"MFU, all ranks ({conv})", "value": d.value,
                            "unit": "fraction", "provenance": derived_provenance(d), "derivation": d.to_dict(),
                            "sub": f"{world} devices; wall clock"}
    if d.value is None:
        tile["missing"] = d.missing
    return tile


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
