"""The utilization ladder per rank and per node, matched by device UUID (docs/spec.md section 19). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainmeter.core.provenance import as_provenance
from trainmeter.gpu.ladder import LABELS, Rung, diagnose


def _device_ladders(gpu: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each sampled device of a node's ``gpu`` section: index, name, uuid, rungs, sentence."""
    ladders = {int(entry["index"]): entry for entry in gpu.get("ladder") or [] if "index" in entry}
    out = []
    for dev in gpu.get("devices") or []:
        entry = ladders.get(int(dev.get("index", -1)))
        if entry is None:
            continue
        out.append({"index": dev.get("index"), "name": dev.get("name"), "uuid": dev.get("uuid"),
                    "rungs": dict(entry.get("rungs") or {}), "dram_bw_util": entry.get("dram_bw_util"),
                    "ofu": (entry.get("ofu") or {}).get("value"), "falloff": entry.get("falloff"),
                    "sentence": entry.get("sentence")})
    return out


def _match(device: Mapping[str, Any] | None, ladders: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    if not device:
        return None, "no device recorded for this rank (it has no CUDA context, or never reported)"
    uuid = (device.get("uuid") or "").lower()
    if uuid:
        for entry in ladders:
            if (entry.get("uuid") or "").lower() == uuid:
                return entry, "matched by UUID"
        return None, f"its device {device['uuid']} is not among the devices its node's sampler read"
    index = device.get("nvml_index")
    for entry in ladders:
        if index is not None and entry.get("index") == index:
            return entry, f"matched by NVML index {index} ({device.get('how')})"
    return None, f"its device (NVML index {index}, assumed) is not among the devices its node's sampler read"


def _rank_rungs(entry: Mapping[str, Any], mfu: float | None, mfu_missing: str | None,
                mfu_provenance: str | None = None) -> tuple[dict[str, Any], str | None, str]:
    """The device's first three rungs with the rank's own MFU (its provenance by the one rule, from its
    passport's MFU derivation), and the fall-off decided again."""
    rungs = {k: dict(v) for k, v in (entry.get("rungs") or {}).items()}
    rungs["mfu"] = {"value": mfu, "source": "this rank's MFU (its tokens, one device)",
                    "provenance": as_provenance(mfu_provenance, "counted"),
                    "missing": None if mfu is not None else (mfu_missing or "this rank has no MFU")}
    shown = {key: rungs.get(key) or {} for key in ("gpu_util", "sm_activity", "tensor_activity", "mfu")}
    objects = tuple(Rung(key=key, label=LABELS.get(key, key), value=r.get("value"), source=r.get("source") or "",
                         provenance=as_provenance(r.get("provenance"), "measured"), missing=r.get("missing"))
                    for key, r in shown.items())
    falloff, sentence = diagnose(objects, ofu=entry.get("ofu"), dram_bw_util=entry.get("dram_bw_util"))
    return rungs, falloff, sentence


def launch_ladders(ranks: Sequence[Any], node_gpus: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``distributed.gpu_ladder`` section (docs/spec.md section 19) of ``ranks``
    (:class:`~trainmeter.ranks.merge.RankSummary`) from the ranks' own ``node_gpu`` and ``node_gpus`` (node -> its
    sampler's passport ``gpu`` section, over theirs), or ``None`` when there is none."""
    node_gpus = {**{r.node: r.node_gpu for r in ranks if r.node and r.node_gpu}, **node_gpus}
    if not node_gpus:
        return None
    nodes = {node: _device_ladders(gpu) for node, gpu in node_gpus.items()}
    missing = [f"{node}: {gpu.get('reason')}" for node, gpu in node_gpus.items()
               if not gpu.get("available", True) and gpu.get("reason")]
    rows = []
    for r in ranks:
        label = r.label
        ladders = nodes.get(r.node or "")
        if ladders is None:
            missing.append(f"{label}: no GPU sampler's record from its node {r.node}")
            continue
        entry, how = _match(r.device, ladders)
        if entry is None:
            missing.append(f"{label}: {how}")
            continue
        own = getattr(getattr(r, "compute", None), "own_mfu_provenance", None)
        rungs, falloff, sentence = _rank_rungs(entry, r.mfu, r.mfu_missing, own)
        rows.append({"seat": r.seat, "rank": r.rank, "node": r.node, "index": entry["index"],
                     "uuid": entry.get("uuid"), "name": entry.get("name"), "matched": how, "rungs": rungs,
                     "falloff": falloff, "sentence": sentence})
    return {"ranks": rows, "nodes": nodes, "missing": missing}
