"""The passport's ``gpu`` section (docs/spec.md section 8): devices, driver, peaks used, ladder averages, reasons.

Reads a sampler's snapshots (thread-safe). JSON-ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmeter.gpu.backend import GpuSample
from trainmeter.gpu.ladder import Ladder, build_ladder
from trainmeter.gpu.sampler import GpuAverages, GpuSampler

PEAKS_PLACEHOLDER_NOTE = "peak FLOP/s used for MFU: filled in by the FLOPs/peaks module"


def training_averages(sampler: GpuSampler) -> tuple[Mapping[int, GpuAverages], str]:
    """The sampler's means over the training window when it holds samples, else over the whole run, and which."""
    window = sampler.window_averages()
    if any(a.n_samples > 0 for a in window.values()):
        return window, "training window"
    return sampler.averages(), "whole run"


def gpu_passport_from_sampler(sampler: GpuSampler, *, ladders: Mapping[int, Ladder] | None = None,
                              peaks_used: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``gpu`` section from a (stopped or running) sampler; ``available`` False with ``reason`` when nothing was
    sampled. Averages cover :func:`training_averages`; ``ladders`` default to ones built from them (without MFU); a
    MIG-enabled GPU's latest sample gives ``mig_gpm``."""
    averages, span = training_averages(sampler)
    devices, status, latest = sampler.devices, sampler.status(), sampler.latest()
    unavailable_reason, selection = sampler.unavailable_reason, sampler.selection
    missing = [unavailable_reason] if unavailable_reason else []
    missing += selection.notes if selection is not None else ()
    out_devices = []
    out_ladders = []
    for index in sorted(devices):
        info, st, avg = devices[index], status.get(index), averages.get(index)
        entry: dict[str, Any] = {"index": index, **{k: getattr(info, k) for k in (
            "name", "uuid", "mem_total_bytes", "mig_enabled", "gpm_supported", "gpm_reason")},
            "mem_used_peak_bytes": None if avg is None else avg.mem_used_peak_bytes,
            "n_samples": 0 if avg is None else avg.n_samples}
        if info.mig_enabled:
            entry.update(_mig_entry(latest.get(index)))
        if st is not None:
            entry.update(n_errors=st.n_errors, stopped_reason=st.stopped_reason)
        whys = (entry.get("mig_gpm_reason"), info.reason, st.stopped_reason if st is not None else None)
        missing += [f"GPU {index}: {why}" for why in whys if why]
        out_devices.append(entry)
        ladder = (ladders or {}).get(index)
        if ladder is None and avg is not None and avg.n_samples > 0:  # without MFU
            ladder = build_ladder(avg, device_name=info.name)
        if ladder is not None:
            out_ladders.append(_ladder_dict(index, ladder))
            missing.extend(f"GPU {index}: {r.label}: {r.missing}" for r in ladder.rungs if r.missing and r.key != "mfu")
    selected = None if selection is None else {"indices": list(selection.indices), "provenance": selection.provenance,
                                               "how": selection.how, "notes": list(selection.notes)}
    return {"available": bool(out_devices) and not unavailable_reason, "reason": unavailable_reason,
            "driver_version": sampler.driver_version, "selection": selected, "devices": out_devices,
            "peaks_used": {"value": None, "note": PEAKS_PLACEHOLDER_NOTE} if peaks_used is None else dict(peaks_used),
            "averaged_over": span, "ladder": out_ladders, "missing": list(dict.fromkeys(missing))}


def _ladder_dict(index: int, ladder: Ladder) -> dict[str, Any]:
    rungs = {r.key: {"value": r.value, "source": r.source, "provenance": r.provenance, "missing": r.missing}
             for r in ladder.rungs}
    return {"index": index, "rungs": rungs, "dram_bw_util": ladder.dram_bw_util.value, "ofu": ladder.ofu.to_dict(),
            "arithmetic_intensity": ladder.arithmetic_intensity.to_dict(), "falloff": ladder.falloff,
            "sentence": ladder.sentence}


def _mig_entry(sample: GpuSample | None) -> dict[str, Any]:
    """GPM per MIG GPU instance from a MIG-enabled GPU's latest sample (``mig_gpm``), or why there is none."""
    if sample is None:
        return {"mig_gpm": [], "mig_gpm_reason": "no sample of this GPU yet"}
    rows = [{"gpu_instance_id": m.gpu_instance_id, "uuid": m.uuid, "gpm_window_s": m.gpm_window_s,
             **dict(m.values), "missing": dict(m.unavailable)} for m in sample.mig_gpm]
    return {"mig_gpm": rows, "mig_gpm_reason": sample.mig_gpm_reason}

