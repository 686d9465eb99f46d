"""The wiring: which wings a run gets, and the monitor assembled with them (the core imports no wing)."""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from trainmeter.core.extension import order_extensions
from trainmeter.core.monitor import Monitor
from trainmeter.options import MonitorOptions

# Every wing name a requirement may name (a name missing from a run, a rank's gpu and node, is allowed).
WING_NAMES = ("overhead", "compute", "gpu", "energy", "time", "node", "taps", "distributed", "optim", "curves",
              "verdicts", "alerts", "frameworks", "lineage")


def default_extensions(options: MonitorOptions) -> list[Any]:
    """The sources and sinks a run gets besides the core, in the order their ``requires`` and ``precedes`` give
    (docs/contracts/EXTENSIONS.md; ties keep the order listed here)."""
    from trainmeter.alerts.extension import Alerts
    from trainmeter.comparison.extension import CurvesRecorder
    from trainmeter.compute.extension import ComputeExtension
    from trainmeter.energy.extension import EnergyExtension
    from trainmeter.gpu.extension import GpuExtension
    from trainmeter.host.extension import NodeSampler
    from trainmeter.integrations.extension import pair
    from trainmeter.lineage.extension import Lineage
    from trainmeter.optim.extension import OptimExtension
    from trainmeter.overhead.extension import Overhead
    from trainmeter.ranks.extension import RanksExtension
    from trainmeter.ranks.seating import detect_identity, inherited_run_dir
    from trainmeter.timesplit.extension import TimeSplit
    from trainmeter.verdicts.extension import Verdicts

    identity = detect_identity()
    # local rank 0 of a launch with several ranks per node samples every rank's device, not only its own
    gpu = GpuExtension(node_wide=identity.distributed and (identity.local_world_size or 1) > 1)
    out: list[Any] = [Overhead(), ComputeExtension(), gpu, EnergyExtension(), TimeSplit(), NodeSampler(),
                      *pair(tap=options.tap), RanksExtension(), OptimExtension(),
                      CurvesRecorder(), Verdicts(), Alerts(options.alerts)]  # curves: curves.json, so tm.compare need not re-read the log
    if options.resume is not None:  # a run that continues a saved one (docs/spec.md section 22)
        out.append(Lineage(options.resume))
    # node samplers run once per node: on local rank 0, and not in a child whose monitored parent samples
    if identity.local_rank not in (None, 0) or inherited_run_dir() is not None:
        out = [ext for ext in out if ext.name not in ("gpu", "node")]
    return order_extensions(out, known=WING_NAMES)


def _save_dashboard(run: Any) -> None:
    """Write ``dashboard.json`` for a run with no widget open (a live widget's close writes it)."""
    from trainmeter.widget.view_model import build_state, facts_from_monitor, save_dashboard

    attach = sys.modules.get("trainmeter.widget.attach")  # not loaded: no widget was ever shown, so no publisher
    publisher = attach.live_publisher() if attach is not None else None
    if publisher is not None and publisher.monitor is run and not publisher.closed:
        return  # its close writes the file (with the live view's figures), once
    save_dashboard(run.run_dir, build_state(facts_from_monitor(run)))


def make_monitor(options: MonitorOptions, **kwargs: Any) -> Monitor:
    """A :class:`Monitor` wired to the record wing (``RunRecorder``) and the GPU wing's allocator reader; keyword
    arguments go to :class:`Monitor`."""
    from trainmeter.record.recorder import RunRecorder

    kwargs.setdefault("record", RunRecorder(after_passport=_save_dashboard))
    kwargs.setdefault("cuda_memory", lambda: importlib.import_module("trainmeter.gpu.cuda_memory").CudaMemoryMonitor())
    kwargs.setdefault("finish_imports", functools.partial(preload, FINISH_MODULES))
    return Monitor(options, **kwargs)


# What ``%load_ext trainmeter`` imports ahead: the modules a run's start would otherwise import on the training
# thread (docs/spec.md section 20, "Start"); none imports torch, installs a patch or starts a thread.
START_MODULES = (
    # the wings (trainmeter.extensions.default_extensions) and what their modules import
    "trainmeter.extensions", "trainmeter.alerts.extension", "trainmeter.comparison.extension",
    "trainmeter.compute.extension", "trainmeter.energy.extension", "trainmeter.integrations.extension",
    "trainmeter.gpu.extension", "trainmeter.host.extension", "trainmeter.optim.extension",
    "trainmeter.overhead.extension", "trainmeter.ranks.extension", "trainmeter.ranks.seating",
    "trainmeter.ranks.autostart",
    "trainmeter.timesplit.extension", "trainmeter.verdicts.extension", "trainmeter.record.recorder",
    "trainmeter.lineage.extension", "trainmeter.lineage.parent",
    # the core's probes, installed at start
    "trainmeter.core.probes", "trainmeter.core.wrappers", "trainmeter.core.discovery", "trainmeter.core.loss_capture",
    "trainmeter.core.root_calls", "trainmeter.core.batch", "trainmeter.core.explicit_steps",
    "trainmeter.core.reachable", "trainmeter.core.probe_state",
    "trainmeter.compute.peaks",
    # the GPU sampler's modules (it opens NVML on its own thread: imported here, no import runs there)
    "trainmeter.gpu.sampler", "trainmeter.gpu.selection", "trainmeter.gpu.cuda_memory", "trainmeter.gpu.backend",
    "trainmeter.gpu.nvml",
    # psutil: the node sampler's; imported on this thread, never by a sampler while a fork may come
    "psutil",
    # the ranks wing's start reads multiprocessing's spawn launcher (stdlib; imports no torch)
    "multiprocessing.popen_spawn_posix",
)

# What the first report (the compute wing's model read and counted pass) and the finish (the passport, the
# replay's dashboard file) import of ours; ``%load_ext`` imports them too (docs/spec.md section 20, "Finish").
REPORT_AND_FINISH_MODULES = (
    "trainmeter.compute.flops", "trainmeter.compute.mfu", "trainmeter.compute.eta", "trainmeter.compute.calibrate",
    "trainmeter.compute.model_shape", "trainmeter.compute.shape_module",
    "trainmeter.compute.flop_count", "trainmeter.compute.counted_pass",
    "trainmeter.compute.card", "trainmeter.gpu.ladder",
    "trainmeter.record.passport", "trainmeter.widget.view_model", "trainmeter.widget.facts",
    "trainmeter.widget.look", "trainmeter.optim.smoothing", "trainmeter.widget.x_axis", "trainmeter.widget.controls",
)

# What the passport and ``dashboard.json`` import of ours, imported on the training thread at finish before the report
# worker builds them (already imported after :func:`preload`: a lookup each; one that fails is said by the build).
FINISH_MODULES = tuple(name for name in REPORT_AND_FINISH_MODULES if name.startswith(
    ("trainmeter.compute.card", "trainmeter.gpu.ladder", "trainmeter.record.passport", "trainmeter.widget.")))


def preload(modules: tuple[str, ...] = (*START_MODULES, *REPORT_AND_FINISH_MODULES)) -> list[str]:
    """Import ``modules`` (:data:`START_MODULES` and :data:`REPORT_AND_FINISH_MODULES`; at finish
    :data:`FINISH_MODULES`); ``"module: error"`` for each that failed. Call on the thread that runs the user's cells
    (``%load_ext`` does); never raises."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module that fails here fails again, and says so, at start
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed
