"""The ranks panel: one row per rank from a :class:`~trainmeter.ranks.follow.RunFollower` (docs/protocol.md panel)."""

from __future__ import annotations

import time
from typing import Any

from trainmeter.ranks.follow import RunFollower
from trainmeter.ranks.identity import this_node
from trainmeter.ranks.merge import process_alive
from trainmeter.ranks.stragglers import score_ranks

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
        timing = fields.get("timing") or {}
        key: int | str = r.rank if r.rank is not None else r.seat
        if timing:
            timings[key] = timing
        status = r.status
        if status == "running" and r.node == this_node() and not process_alive(r.pid):
            status = f"died at step {r.steps}"
        elif status == "running" and r.updated_s and now - r.updated_s > STALE_S:
            status = f"silent for {now - r.updated_s:.0f} s"
        sps = (interval.get("throughput") or {}).get("seconds_per_step")
        rows.append({"label": f"rank {r.rank}" if r.rank is not None else r.seat, "value": r.steps, "unit": "steps",
                     "provenance": "counted",
                     "note": f"{status}; {sps:.3g} s/step" if sps else status})
    report = score_ranks(timings)
    note = report.verdict if report is not None else "straggler scores need two ranks with timed steps"
    return {"id": "ranks", "title": f"Ranks ({len(ranks)})", "rows": rows, "note": note}
