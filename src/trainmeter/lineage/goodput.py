"""The training's goodput: the share of its wall time across the lineage not lost to a restart (docs/spec.md section
22, "The training's goodput"). Pure arithmetic on what the lineage wing read; any thread."""

from __future__ import annotations

from typing import Any

from trainmeter.core.provenance import Derivation, Input
from trainmeter.sizes import format_duration, format_percent


def _plus(*values: Any) -> Any:
    return None if any(v is None for v in values) else sum(values)


def training_time(*, parent_wall_s: float | None, gap_s: float | None, elapsed_s: float, earlier_lost_s: float | None,
                  lost_s: float | None, restart_s: float | None) -> dict[str, Any]:
    """``wall_s``, ``lost_s``, ``useful_s`` and ``goodput`` of the training up to this run's end (``None`` where an
    input is unknown): ``wall_s = parent_wall_s + gap_s + elapsed_s``, ``lost_s = earlier_lost_s + lost_s``,
    ``useful_s = wall_s - lost_s - restart_s`` with ``restart_s`` summed over the lineage, ``goodput = useful_s /
    wall_s``."""
    wall_s = _plus(parent_wall_s, gap_s, elapsed_s)
    lost_total_s = _plus(earlier_lost_s, lost_s)
    useful_s = None if wall_s is None or lost_total_s is None or restart_s is None else \
        max(0.0, wall_s - lost_total_s - restart_s)
    goodput = useful_s / wall_s if useful_s is not None and wall_s else None
    return {"wall_s": wall_s, "lost_s": lost_total_s, "useful_s": useful_s, "goodput": goodput}


def goodput_derivation(t: dict[str, Any]) -> Derivation:
    """The training's goodput with its three measured inputs."""
    def seconds(name: str, source: str) -> Input:
        return Input(name=name, value=t.get(name), unit="s", provenance="measured", source=source)

    return Derivation(name="training_goodput", formula="(wall_s - lost_s - restart_s) / wall_s", unit="1",
                      value=t.get("goodput"), inputs=(
                          seconds("wall_s", "each run's session clock plus the gaps between a run's end and the next "
                                            "one's start (started_at, ended_at)"),
                          seconds("lost_s", "each parent's session seconds after the step resumed from (its step "
                                            "series' time at that step to its end)"),
                          seconds("restart_s", "each gap plus the next run's session seconds to its first step")))


def goodput_line(t: dict[str, Any]) -> str:
    """passport.md's goodput line of the training."""
    return (f"- Goodput of the training: {format_percent(t.get('goodput'))} (useful {format_duration(t.get('useful_s'))}"
            f" of {format_duration(t.get('wall_s'))} wall; lost work {format_duration(t.get('lost_s'))}, restart "
            f"{format_duration(t.get('restart_s'))})")
