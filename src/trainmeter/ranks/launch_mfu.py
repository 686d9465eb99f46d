"""MFU of a whole launch: compute's MFU (docs/spec.md section 5) with devices = world size, and the utilization
ladder per rank and per node, matched by device UUID (section 19). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainmeter.compute.flops import flops_input, mfu_conventions, with_counted
from trainmeter.compute.mfu import PACES, PEAK_FLAGS, mfu_derivation, mfu_name, peak_input
from trainmeter.compute.peaks import PeakRow
from trainmeter.core.provenance import Derivation, Input, Provenance, as_provenance, finite_number, weakest
from trainmeter.gpu.ladder import LABELS, Rung, diagnose

PREFIX = "distributed."  # a launch's MFU beside a rank's own: distributed.mfu[hf], distributed.mfu.session[hf]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankCompute:
    """What one rank's files say about its compute (its passport, else its latest interval record; ``None``: they
    do not say); ``own_mfu_provenance``: the weakest of its own ``mfu[conv]`` inputs."""

    label: str
    tokens: int = 0
    wall_s: float | None = None
    train_s: float | None = None
    flops_per_token: Mapping[str, float | None] = field(default_factory=dict)
    peak: Input | None = None
    peak_missing: str | None = None
    convention: str | None = None
    own_mfu_provenance: Provenance | None = None


def _finite(value: Any) -> float | None:
    """A positive finite number read from a rank's file, else ``None``."""
    number = finite_number(value)
    return number if number is not None and number > 0 else None


def rank_compute(label: str, record: Mapping[str, Any]) -> RankCompute:
    """A rank's compute inputs from its ``passport.json`` (its ``compute`` section and own MFU derivation), or from its
    latest ``interval`` record (``distributed.compute``, written by the rank; ``{}``: none yet)."""
    if record.get("kind") == "interval" or not record:
        fields = (record.get("distributed") or {}).get("compute") or {}
        peak = _finite(fields.get("peak_flops_per_s"))
        compute = {"flops_per_token": dict(fields.get("flops_per_token") or {}), "convention": fields.get("convention"),
                   "peak_missing": fields.get("peak_missing"), "peak": None if peak is None else Input(
                       name="peak", value=peak, unit="FLOP/s", source=str(fields.get("peak_text") or ""),
                       provenance=as_provenance(fields.get("peak_provenance")))}
    else:
        section = record.get("compute") or {}
        row = PeakRow.from_dict(section.get("peak"))
        own_name = mfu_name(section.get("convention") or "hf")  # the rank's own MFU (ranks/merge.py picks the same)
        own = next((d for d in record.get("derivations") or [] if isinstance(d, dict) and d.get("name") == own_name),
                   None)
        own_provenance = weakest(i.get("provenance") for i in (own or {}).get("inputs") or [] if isinstance(i, dict))
        compute = {"flops_per_token": with_counted(section.get("flops_per_token") or {},
                                                   section.get("counted_flops_per_token")),
                   "convention": section.get("convention"), "peak_missing": section.get("mfu_missing"),
                   "peak": peak_input(row) if row is not None else None,
                   "own_mfu_provenance": as_provenance(own_provenance) if own_provenance else None}
    return RankCompute(label=label, tokens=int(record.get("tokens") or 0), wall_s=_finite(record.get("elapsed_s")),
                       train_s=_finite((record.get("phases_s") or {}).get("train")), **compute)


def launch_mfu(ranks: Sequence[RankCompute], world_size: int, convention: str, *,
               pace: str = "session", missing_ranks: Sequence[int] = ()) -> Derivation:
    """The launch's MFU under ``convention`` over ``world_size`` devices at ``pace`` (``session`` or
    ``training-only``), named ``distributed.mfu[conv]`` or ``distributed.mfu.session[conv]``."""
    name = mfu_name(convention, pace, PREFIX)
    seconds_name = "wall_s" if pace == "session" else "train_s"
    fs = [_finite(r.flops_per_token.get(convention)) for r in ranks]
    peaks = [_finite(r.peak.value) if r.peak is not None else None for r in ranks]
    long_s = max((s for r in ranks if (s := getattr(r, seconds_name)) is not None), default=None)
    f_in = flops_input(convention, fs[0] if fs and None not in fs else None,
                       source=f"every rank's compute.flops_per_token[{convention}]")
    tokens_in = Input(name="global_tokens", value=sum(r.tokens for r in ranks), unit="tokens", provenance="counted",
                      source=" + ".join(f"{r.label} {r.tokens}" for r in ranks) or "no rank")
    s_in = Input(name=seconds_name, value=long_s, unit="s", provenance="measured",
                 source=("the longest rank's session wall clock" if pace == "session"
                         else "the longest rank's seconds inside training steps") + " (ranks run at once)")
    devices_in = Input(name="devices", value=world_size, unit="1", provenance="detected",
                       source="world size (one device per rank)")
    equal = len(ranks) > 0 and all(p is not None for p in peaks) and len({round(p or 0, 3) for p in peaks}) == 1
    first = next((r.peak for r, p in zip(ranks, peaks, strict=True) if p is not None), None)
    if first is None:
        peak_inputs = (Input(name="peak", value=None, unit="FLOP/s", provenance="detected",
                             source="no rank has a peak"),)
    elif equal or None in peaks:
        peak_inputs = (replace(first, name="peak", value=first.value if equal else None),)
    else:
        peak_inputs = tuple(replace(r.peak, name=f"peak[{r.label}]") for r in ranks if r.peak is not None)
    missing = _why_missing(ranks, world_size, convention, fs, peaks, long_s, pace, missing_ranks)
    return mfu_derivation(name=name, flops_per_token=f_in, rate=(tokens_in, s_in), devices=devices_in,
                          peaks=peak_inputs, pace=pace, missing=missing)


def _why_missing(ranks: Sequence[RankCompute], world_size: int, convention: str, fs: list[float | None],
                 peaks: list[float | None], long_s: float | None, pace: str,
                 missing_ranks: Sequence[int]) -> str | None:
    if not ranks:
        return "no rank has a record yet"
    if missing_ranks:
        return (f"no record from rank(s) {', '.join(map(str, missing_ranks))} of world size {world_size}: "
                "their tokens and devices are unknown")
    if len(ranks) < world_size:
        return f"{len(ranks)} of {world_size} ranks recorded: the others' tokens and devices are unknown"
    no_f = [r.label for r, f in zip(ranks, fs, strict=True) if f is None]
    if no_f:
        return (f"FLOPs per token ({convention}) unknown on {', '.join(no_f)}: it is read from the model at the "
                "rank's first report after its first step")
    if max(fs) - min(fs) > 1e-9 * max(fs):  # every F known here
        listed = ", ".join(f"{r.label} {f:.4g}" for r, f in zip(ranks, fs, strict=True))
        return (f"the ranks report different FLOPs per token ({convention}: {listed}); a sharded model (FSDP, "
                "pipeline or tensor parallel) is counted per shard, so the whole model's F is not known")
    no_peak = [(r.label, r.peak_missing) for r, p in zip(ranks, peaks, strict=True) if p is None]
    if no_peak:
        label, why = no_peak[0]
        text = f"no dense peak for {', '.join(label for label, _ in no_peak)}" + (f" ({why})" if why else "")
        return text + ("; declare it on every rank" if why and PEAK_FLAGS in why
                       else f"; pass {PEAK_FLAGS} to every rank to declare one")
    if long_s is None:
        return ("no rank has measured seconds yet" if pace == "session"
                else "no rank has measured training-only seconds yet")
    return None


def launch_mfu_figures(ranks: Sequence[RankCompute], world_size: int, convention: str | None = None,
                       missing_ranks: Sequence[int] = ()) -> dict[str, Any]:
    """The ``distributed`` section's ``mfu*`` keys (``mfu``, ``mfu_session``: by convention) and ``derivations``."""
    convs = mfu_conventions((c for r in ranks for c in r.flops_per_token), convention) or ["hf"]  # compute's rule
    pairs = {conv: [launch_mfu(ranks, world_size, conv, pace=pace, missing_ranks=missing_ranks) for pace in PACES]
             for conv in convs}  # (training-only, session) each
    derivations = [d for pair in pairs.values() for d in pair]
    return {"mfu": {conv: train.value for conv, (train, _) in pairs.items()},
            "mfu_session": {conv: wall.value for conv, (_, wall) in pairs.items()}, "mfu_devices": world_size,
            "mfu_convention": convention, "mfu_missing": next((d.missing for d in derivations if d.missing), None),
            "derivations": derivations}


def _device_ladders(gpu: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each sampled device of a node's ``gpu`` section: index, name, uuid, rungs, sentence."""
    ladders = {int(entry["index"]): entry for entry in gpu.get("ladder") or [] if "index" in entry}
    return [{"index": dev.get("index"), "name": dev.get("name"), "uuid": dev.get("uuid"),
             "rungs": dict(entry.get("rungs") or {}), "dram_bw_util": entry.get("dram_bw_util"),
             "ofu": (entry.get("ofu") or {}).get("value"), "falloff": entry.get("falloff"),
             "sentence": entry.get("sentence")}
            for dev in gpu.get("devices") or [] if (entry := ladders.get(int(dev.get("index", -1)))) is not None]


def _match(device: Mapping[str, Any] | None, ladders: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    if not device:
        return None, "no device recorded for this rank (it has no CUDA context, or never reported)"
    uuid, index = (device.get("uuid") or "").lower(), device.get("nvml_index")
    if uuid:
        entry = next((e for e in ladders if (e.get("uuid") or "").lower() == uuid), None)
        return entry, ("matched by UUID" if entry is not None
                       else f"its device {device['uuid']} is not among the devices its node's sampler read")
    entry = next((e for e in ladders if index is not None and e.get("index") == index), None)
    return entry, (f"matched by NVML index {index} ({device.get('how')})" if entry is not None
                   else f"its device (NVML index {index}, assumed) is not among the devices its node's sampler read")


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
        ladders = nodes.get(r.node or "")
        if ladders is None:
            missing.append(f"{r.label}: no GPU sampler's record from its node {r.node}")
            continue
        entry, how = _match(r.device, ladders)
        if entry is None:
            missing.append(f"{r.label}: {how}")
            continue
        # the device's first three rungs with the rank's own MFU (its provenance by the one rule, from its passport's
        # MFU derivation), and the fall-off decided again
        rungs = {k: dict(v) for k, v in (entry.get("rungs") or {}).items()}
        own = getattr(getattr(r, "compute", None), "own_mfu_provenance", None)
        rungs["mfu"] = {"value": r.mfu, "source": "this rank's MFU (its tokens, one device)",
                        "provenance": as_provenance(own, "counted"),
                        "missing": None if r.mfu is not None else (r.mfu_missing or "this rank has no MFU")}
        shown = {key: rungs.get(key) or {} for key in ("gpu_util", "sm_activity", "tensor_activity", "mfu")}
        falloff, sentence = diagnose(tuple(Rung(key=key, label=LABELS.get(key, key), value=g.get("value"),
                                                source=g.get("source") or "", missing=g.get("missing"),
                                                provenance=as_provenance(g.get("provenance"), "measured"))
                                           for key, g in shown.items()),
                                     ofu=entry.get("ofu"), dram_bw_util=entry.get("dram_bw_util"))
        rows.append({"seat": r.seat, "rank": r.rank, "node": r.node, "index": entry["index"],
                     "uuid": entry.get("uuid"), "name": entry.get("name"), "matched": how, "rungs": rungs,
                     "falloff": falloff, "sentence": sentence})
    return {"ranks": rows, "nodes": nodes, "missing": missing}
