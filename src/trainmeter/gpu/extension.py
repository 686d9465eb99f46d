"""The GPU extension: the sampler (its own threads, 2 Hz), the ladder with compute's MFU, allocator memory.

At each report the rungs are recorded as time series (``gpu<i>.util``, ``gpu<i>.sm_activity``,
``gpu<i>.tensor_activity``); with no NVML, driver or GPU the run goes on and the reason is shown and recorded. The
passport's ``gpu`` section (docs/spec.md section 8: devices, driver, peaks used, ladder averages, reasons) is built
from a sampler's snapshots (thread-safe), JSON-ready.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.gpu.backend import safe
from trainmeter.gpu.view import GpuView

if TYPE_CHECKING:
    from trainmeter.compute.view import ComputeView
    from trainmeter.core.context import RunContext
    from trainmeter.gpu.ladder import Ladder
    from trainmeter.gpu.sampler import GpuAverages, GpuSampler

_SERIES = (("util_gpu", "util"), ("sm_activity", "sm_activity"), ("tensor_activity", "tensor_activity"))
_GPU_ROWS = (("GPU-Util", "util_gpu", "fraction", "measured"), ("memory used", "mem_used_bytes", "bytes", "measured"),
             ("memory total", "mem_total_bytes", "bytes", "detected"), ("power (W)", "power_w", "", "measured"),
             ("temperature (C)", "temperature_c", "", "measured"), ("SM clock (MHz)", "sm_clock_mhz", "", "measured"))
# imported on the training thread before the sampler's threads start (they import them otherwise): a fork while
# one of them imports would leave the child an import lock held by a thread it does not have (docs/spec.md)
_THREAD_MODULES = ("trainmeter.gpu.nvml", "pynvml")
PEAKS_PLACEHOLDER_NOTE = "peak FLOP/s used for MFU: filled in by the FLOPs/peaks module"


class GpuExtension(ExtensionBase):
    """NVML/GPM sampling and the ladder (name ``gpu``; publishes :class:`~trainmeter.gpu.view.GpuView`).

    ``open_backend``: an injected opener (tests); ``node_wide``: sample the node's devices, not this process's
    (local rank 0 of a launch with several ranks per node samples for all). ``section``: the last ``gpu`` passport
    section built (published: the ranks wing's per-rank ladders).
    """

    name = "gpu"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)
    requires = ("compute",)  # the ladder's MFU rung and the passport's peak: compute's figures of the same report

    def __init__(self, open_backend: Any = None, *, node_wide: bool = False) -> None:
        self._open_backend = open_backend
        self._node_wide = node_wide
        self.section: dict[str, Any] | None = None
        self._m: RunContext | None = None
        self.sampler: Any = None
        self.ladders: dict[int, Any] = {}
        self.crosschecks: dict[int, Any] = {}

    def start(self, monitor: RunContext) -> None:
        """Open NVML and start sampling the selected devices."""
        from trainmeter.gpu.sampler import GpuSampler

        self._m = monitor
        for name in _THREAD_MODULES:
            safe(lambda name=name: importlib.import_module(name))  # no pynvml: the sampler says so
        # opens on its own thread; node-wide: not this process's devices but every device of the node's ranks
        self.sampler = GpuSampler.in_background(monitor.options.gpus, clock=monitor.clock,
                                                open_backend=self._open_backend, cuda_uuids=not self._node_wide)
        self.sampler.begin_window(monitor.clock())
        self.sampler.start()
        if monitor.options.memory_snapshot_step is not None:
            from trainmeter.gpu.cuda_memory import start_memory_history

            reason = start_memory_history()
            if reason:
                monitor.warn_once("memory-snapshot", f"no memory snapshot: {reason}")
            else:
                monitor.at_step(monitor.options.memory_snapshot_step, self._snapshot)

    def view(self) -> GpuView:
        """The sampler's readings and the last passport section (any thread)."""
        return GpuView(readings=self.sampler, section=self.section)

    def _compute(self) -> ComputeView | None:
        return self._m.extension("compute") if self._m is not None else None

    def _snapshot(self) -> None:
        from trainmeter.gpu.cuda_memory import memory_snapshot, stop_memory_history

        m = self._m  # at the snapshot step, once (at_step)
        if m is None or m.run_dir is None:
            return
        path = memory_snapshot(m.steps, m.run_dir)  # memory_snapshot_step<step>.pickle
        stop_memory_history()
        if path is None:
            m.warn_once("memory-snapshot", "the CUDA memory snapshot could not be written")

    def stop(self) -> None:
        """End the training window, stop sampling (immediate) and build the final ladders."""
        if self._m is None:  # never started
            return
        self.sampler.end_window(self._m.clock())
        self.sampler.stop()
        self._warn_open_error()

    def _warn_open_error(self) -> None:
        """Opening NVML raised on the sampler's thread (a started wing's): say so once, on the training thread."""
        if self.sampler.open_error:
            self._m.warn_once("gpu-open", f"{self.sampler.open_error} (the run goes on without GPU readings)")

    def _build(self, readings: dict[int, Any]) -> dict[int, Any]:
        """The ladder of each reading, with compute's MFU (the weakest input's provenance) and the model FLOP/s it
        divides, and formula MFU vs its tensor pipes (``crosschecks``, gpu/ladder.py)."""
        from trainmeter.core.provenance import derived_provenance
        from trainmeter.gpu.ladder import build_ladder, cross_check

        compute = self._compute()
        d = compute.mfu() if compute is not None else None
        flops = compute.flop_per_s() if d is not None else None
        mfu: dict[str, Any] = {"mfu_missing": "the compute extension is off" if compute is None
                               else "MFU needs a named convention (--convention) and a peak"}
        if d is not None:
            mfu = {"mfu": d.value, "mfu_missing": d.missing, "mfu_provenance": derived_provenance(d)}
        if flops is not None:
            mfu.update(flop_per_s=flops.value, flop_provenance=derived_provenance(flops),
                       flop_source=f"{flops.formula}, the numerator of {d.name} (compute's view)")
        peak = compute.peak if compute is not None else None
        counted = compute.mfu("counted") if compute is not None else None
        judge = {"peak_flops_per_s": peak.flops_per_s if peak is not None else None,
                 "peak_source": f"{peak.card} dense {peak.dtype}: {peak.source}" if peak is not None else "",
                 "formula_mfu": mfu.get("mfu"), "counted_mfu": counted.value if counted is not None else None,
                 "tokens_are_samples": getattr(self._m, "token_unit", "tokens") == "samples"}
        out, checks = {}, {}
        for index, reading in readings.items():
            from trainmeter.gpu.amdsmi_backend import LADDER_SOURCES, REASON_AMD_NO_ACTIVITY  # not before a device

            dev = self.sampler.devices.get(index)
            amd = getattr(dev, "gpm_reason", None) == REASON_AMD_NO_ACTIVITY  # the ladder's source texts differ
            out[index] = build_ladder(reading, **mfu, device_name=getattr(dev, "name", None),
                                      sources=LADDER_SOURCES if amd else None)
            checks[index] = cross_check(out[index].ofu, tensor_activity=getattr(reading, "tensor_activity", None),
                                        **judge)
        self.crosschecks = checks
        return out

    def on_report(self, report: Report) -> dict[str, Any]:
        """Latest per-device readings and ladder sentences; records the rungs as series."""
        if self.sampler is None:
            return {}
        self._warn_open_error()
        latest = self.sampler.latest()
        self.ladders = self._build(latest)
        out: dict[str, Any] = {}
        for index, sample in latest.items():
            row = {field: getattr(sample, field, None) for field in (
                "util_gpu", "sm_activity", "tensor_activity", "dram_bw_util", "mem_used_bytes", "power_w",
                "temperature_c", "sm_clock_mhz")}
            out[str(index)] = {**row, "ladder": self.ladders[index].sentence,
                               "crosscheck": self.crosschecks[index].sentence}
            for field, short in _SERIES:
                if row[field] is not None:
                    self._m.record_at(f"gpu{index}.{short}", report.elapsed_s, row[field])
        if not latest and self.sampler.unavailable_reason:
            out["unavailable"] = self.sampler.unavailable_reason
        return out

    def panels(self) -> list[dict[str, Any]]:
        """A ladder panel and a GPU panel per device (publisher thread; reads only)."""
        from trainmeter.gpu.ladder import ladder_panel_rows

        if self.sampler is None:
            return []
        reason = self.sampler.unavailable_reason
        if reason and not self.sampler.indices:
            return [{"id": "gpu", "title": "GPU", "rows": [], "note": reason}]
        panels = []
        for index, ladder in sorted(self.ladders.items()):
            check = self.crosschecks.get(index)
            judged = check is not None and check.verdict is not None  # an unjudged one is in the passport only
            note = f"{ladder.sentence} {check.sentence}" if judged else ladder.sentence
            panels.append({"id": f"ladder{index}", "title": f"Utilization ladder, GPU {index}",
                           "rows": ladder_panel_rows(ladder), "note": note})
        for index, sample in sorted(self.sampler.latest().items()):
            rows = [{"label": label, "value": getattr(sample, field), "unit": unit, "provenance": provenance}
                    for label, field, unit, provenance in _GPU_ROWS]
            name = getattr(self.sampler.devices.get(index), "name", "")
            panels.append({"id": f"gpu{index}", "title": f"GPU {index}: {name}", "rows": rows})
        return panels

    def charts(self) -> list[dict[str, Any]]:
        """The ladder over time, one chart per device."""
        if self.sampler is None:
            return []
        return [{"id": f"ladder{i}", "title": f"Ladder over time, GPU {i}", "x": "time", "unit": "fraction",
                 "series": [f"gpu{i}.{short}" for _, short in _SERIES]} for i in self.sampler.indices]

    def passport_section(self) -> dict[str, Any]:
        """The passport's ``gpu`` section."""
        if self.sampler is None:
            return {"available": False, "reason": "GPU sampling did not start"}
        compute = self._compute()
        peak = compute.peak if compute is not None else None
        peaks_used = None if peak is None else {k: v for k, v in peak.to_dict().items() if k != "provenance"}
        self.ladders = self._build(training_averages(self.sampler)[0])
        self.section = gpu_passport_from_sampler(self.sampler, ladders=self.ladders, peaks_used=peaks_used)
        self.section["crosscheck"] = {str(i): c.to_dict() for i, c in sorted(self.crosschecks.items())}
        return self.section


def training_averages(sampler: GpuSampler) -> tuple[Mapping[int, GpuAverages], str]:
    """The sampler's means over the training window when it holds samples, else over the whole run, and which."""
    window = sampler.window_averages()
    if any(a.n_samples > 0 for a in window.values()):
        return window, "training window"
    return sampler.averages(), "whole run"


def gpu_passport_from_sampler(sampler: GpuSampler, *, ladders: Mapping[int, Ladder],
                              peaks_used: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``gpu`` section from a (stopped or running) sampler and the ``ladders`` of its devices; ``available`` False
    with ``reason`` when nothing was sampled. Averages cover :func:`training_averages`; a MIG-enabled GPU's latest
    sample gives ``mig_gpm``."""
    averages, span = training_averages(sampler)
    devices, status, latest = sampler.devices, sampler.status(), sampler.latest()
    unavailable_reason, selection = sampler.unavailable_reason, sampler.selection
    missing = [unavailable_reason] if unavailable_reason else []
    missing += selection.notes if selection is not None else ()
    out_devices, out_ladders = [], []
    for index in sorted(devices):
        info, st, avg = devices[index], status.get(index), averages.get(index)
        entry: dict[str, Any] = {"index": index, **{k: getattr(info, k) for k in (
            "name", "uuid", "mem_total_bytes", "mig_enabled", "gpm_supported", "gpm_reason")},
            "mem_used_peak_bytes": None if avg is None else avg.mem_used_peak_bytes,
            "n_samples": 0 if avg is None else avg.n_samples}
        sample = latest.get(index)
        if info.mig_enabled and sample is None:
            entry.update(mig_gpm=[], mig_gpm_reason="no sample of this GPU yet")
        elif info.mig_enabled:  # GPM per MIG GPU instance from its latest sample
            entry.update(mig_gpm=[{"gpu_instance_id": m.gpu_instance_id, "uuid": m.uuid, "gpm_window_s": m.gpm_window_s,
                                   **dict(m.values), "missing": dict(m.unavailable)} for m in sample.mig_gpm],
                         mig_gpm_reason=sample.mig_gpm_reason)
        if st is not None:
            entry.update(n_errors=st.n_errors, stopped_reason=st.stopped_reason)
        whys = (entry.get("mig_gpm_reason"), info.reason, st.stopped_reason if st is not None else None)
        missing += [f"GPU {index}: {why}" for why in whys if why]
        out_devices.append(entry)
        ladder = ladders.get(index)
        if ladder is not None:
            rungs = {r.key: {"value": r.value, "source": r.source, "provenance": r.provenance, "missing": r.missing}
                     for r in ladder.rungs}
            intensity = ladder.arithmetic_intensity.to_dict()
            out_ladders.append({"index": index, "rungs": rungs, "dram_bw_util": ladder.dram_bw_util.value,
                                "ofu": ladder.ofu.to_dict(), "arithmetic_intensity": intensity,
                                "falloff": ladder.falloff, "sentence": ladder.sentence})
            missing.extend(f"GPU {index}: {r.label}: {r.missing}" for r in ladder.rungs if r.missing and r.key != "mfu")
    selected = None if selection is None else {"indices": list(selection.indices), "provenance": selection.provenance,
                                               "how": selection.how, "notes": list(selection.notes)}
    return {"available": bool(out_devices) and not unavailable_reason, "reason": unavailable_reason,
            "driver_version": sampler.driver_version, "selection": selected, "devices": out_devices,
            "peaks_used": {"value": None, "note": PEAKS_PLACEHOLDER_NOTE} if peaks_used is None else dict(peaks_used),
            "averaged_over": span, "ladder": out_ladders, "missing": list(dict.fromkeys(missing))}

