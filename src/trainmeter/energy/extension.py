"""The energy extension (name ``energy``): joules per token, per sample and per PFLOP (docs/spec.md section 13).

A wing of its own because it joins three wings' numbers (GPU, compute, RAPL); sources and window: spec section 13.
CPU package energy (microjoules) is read from Linux RAPL (``/sys/class/powercap``), where readable: which domains,
the wrap and the root-only read, spec section 13. Thread safety: ``tiles`` (publisher thread) reads one immutable
dict reference.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmeter.core.extension import ExtensionBase, Report
from trainmeter.energy.summary import DeviceEnergy, energy_section, energy_tile, from_counter, from_power

if TYPE_CHECKING:
    from trainmeter.compute.view import ComputeView
    from trainmeter.core.context import RunContext
    from trainmeter.core.provenance import Derivation
    from trainmeter.gpu.view import GpuView


POWERCAP_ROOT = Path("/sys/class/powercap")


RaplReading = dict[str, tuple[int, int | None]]
"""One read of every package domain: folder name -> (cumulative energy, wrap-around range or ``None``), microjoules."""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_rapl(root: Path = POWERCAP_ROOT) -> RaplReading | str:
    """Read the package domains under ``root``, or say why there is no reading; never raises."""
    if not root.is_dir():
        return f"no RAPL here ({root} does not exist)"
    reading: RaplReading = {}
    refused = False
    for domain in sorted(root.glob("*rapl:*")):
        try:  # a sub-domain (intel-rapl:0:0) or one that is not a package: skipped
            package = domain.name.count(":") == 1 and (domain / "name").read_text().strip().startswith("package")
        except OSError:
            package = False
        uj = _read_int(domain / "energy_uj") if package else None
        if uj is not None:
            reading[domain.name] = uj, _read_int(domain / "max_energy_range_uj")
        refused = refused or (package and uj is None)
    if reading:
        return reading
    return (f"RAPL energy_uj under {root} is not readable by this user (root-only since CVE-2020-8694)" if refused
            else f"no RAPL package domain under {root}")


def rapl_joules(start: RaplReading | str, end: RaplReading | str) -> tuple[float | None, str | None]:
    """Joules used by all package domains between two reads (one wrap per domain allowed), or why none."""
    if isinstance(start, str) or isinstance(end, str):
        return None, start if isinstance(start, str) else end  # type: ignore[return-value]
    total_uj = 0
    for name, (first, wrap) in start.items():
        last = end[name][0] if name in end else None
        if last is None:
            return None, f"RAPL domain {name} disappeared during the run"
        if last < first and wrap is None:
            return None, f"RAPL domain {name} wrapped and its range is unknown"
        total_uj += last - first + (wrap if last < first else 0)  # type: ignore[operator]
    return total_uj / 1e6, None


class EnergyExtension(ExtensionBase):
    """Energy over the session (name ``energy``); tests pass a ``powercap_root`` folder of fake RAPL files."""

    name = "energy"
    report_on_worker = True  # a steady report runs on_report on the report worker (docs/spec.md section 20)
    # after gpu: it reads the devices the GPU wing selected, and its end counters after the GPU wing's stop;
    # after compute: J/PFLOP divides by the FLOPs spent of the same report
    requires = ("gpu", "compute")

    def __init__(self, powercap_root: Path = POWERCAP_ROOT) -> None:
        self._powercap_root = Path(powercap_root)
        self._m: RunContext | None = None
        self._sampler: Any = None  # the GPU extension's sampler: NVML opens on its thread
        self._gpu_view: GpuView | None = None
        self._t0_s = 0.0
        self._t1_s: float | None = None
        self._gpu_missing: str | None = None
        self._start_mj: dict[int, tuple[float | None, str | None]] = {}  # by device index: the devices measured
        self._end_mj: dict[int, tuple[float | None, str | None]] = {}
        self._rapl_start: RaplReading | str | None = None  # None: GPU energy is used
        self._rapl_end: RaplReading | str | None = None
        self._section: dict[str, Any] = {}
        self._derivations: list[Derivation] = []

    def start(self, monitor: RunContext) -> None:
        """The session's starting point: RAPL now, in case no GPU opens (the GPU counters: the sampler's thread)."""
        self._m = monitor
        self._t0_s = monitor.clock()
        self._gpu_view = monitor.extension("gpu")
        self._sampler = self._gpu_view.readings if self._gpu_view is not None else None
        self._gpu_missing = (getattr(self._sampler, "unavailable_reason", None) if self._sampler is not None
                             else "the GPU extension is off")
        self._rapl_start = read_rapl(self._powercap_root)

    def stop(self) -> None:
        """Take the end counters (idempotent): after the GPU extension's stop, its owner thread read them."""
        m = self._m
        if m is None or self._t1_s is not None:
            return
        self._t1_s = m.clock()
        sampler = self._sampler
        if sampler is not None:
            self._adopt_sampler(final=True)
            if sampler.energy_end is not None:
                self._end_mj, self._t1_s = sampler.energy_end
        if self._rapl_start is not None:
            self._rapl_end = read_rapl(self._powercap_root)

    def _adopt_sampler(self, *, final: bool = False) -> None:
        """Take the devices and start counters the background GPU sampler read on its own thread."""
        start = self._sampler.energy_start
        if self._start_mj:
            return
        if start is None or not start[0]:  # None: not read yet (NVML may still be opening); no counters: no device
            if start is not None or final or not self._gpu_view.opening():
                self._gpu_missing = self._sampler.unavailable_reason or "no GPU selected"
            return
        self._start_mj, self._t0_s = start
        self._gpu_missing = None
        self._rapl_start = None  # GPU energy is used

    def _devices(self, now_s: float, end: dict[int, tuple[float | None, str | None]]) -> list[DeviceEnergy]:
        window_s = now_s - self._t0_s
        averages: Any = {}
        if self._sampler is not None:
            with contextlib.suppress(Exception):  # no averages where the sampler cannot give them
                averages = self._sampler.window_averages()
        out = []
        for index, (first, why_first) in self._start_mj.items():
            name = str(getattr(self._sampler.devices.get(index), "name", "") or "")  # the devices are fixed once open
            last, why_last = end.get(index, (None, "not read at the end"))
            if first is not None and last is not None:
                out.append(from_counter(index, name, first, last, window_s))
                continue
            avg = averages.get(index)
            out.append(from_power(index, name, getattr(avg, "power_w", None), int(getattr(avg, "n_samples", 0) or 0),
                                  window_s, why_first or why_last))
        return out

    def _build(self, now_s: float, end: dict[int, tuple[float | None, str | None]],
               rapl_end: RaplReading | str | None, report: Report | None = None) -> None:
        m = self._m
        rapl_j, rapl_missing = None, "not read: GPU energy is used"
        if self._rapl_start is not None:
            rapl_j, rapl_missing = (rapl_joules(self._rapl_start, rapl_end) if rapl_end is not None
                                    else (None, "RAPL is read at the end of the run"))
        o = m.options
        conv = o.convention
        compute: ComputeView | None = m.extension("compute")
        spent = compute.flops_spent(conv) if compute is not None and conv else None
        self._section, self._derivations = energy_section(
            devices=self._devices(now_s, end), gpu_missing=self._gpu_missing, rapl_j=rapl_j,
            rapl_missing=rapl_missing, window_s=now_s - self._t0_s, tokens=report.tokens if report else m.tokens,
            token_unit=report.token_unit if report else m.token_unit,
            flops_spent=getattr(spent, "value", None), convention=conv,
            flops_missing=getattr(spent, "missing", None),
            grid_gco2_per_kwh=o.grid_gco2_per_kwh, grid_source=o.grid_source)

    def on_report(self, report: Report) -> dict[str, Any]:
        """Energy so far (live tile and run log): joules, J/token, source."""
        m = self._m
        if m is None:
            return {}
        if self._sampler is not None and self._t1_s is None:
            self._adopt_sampler()
        if self._t1_s is None:  # live: the GPU's mean power so far (its counters are read at the end)
            now_s, end = m.clock(), {}
            rapl_end = read_rapl(self._powercap_root) if self._rapl_start is not None else None
        else:
            now_s, end, rapl_end = self._t1_s, self._end_mj, self._rapl_end
        self._build(now_s, end, rapl_end, report)  # the report's tokens (on the report worker: docs/spec.md section 20)
        return {key: self._section.get(key) for key in ("joules", "j_per_token", "j_per_sample", "source")}

    def passport_section(self) -> dict[str, Any]:
        """The passport's ``energy`` section (docs/spec.md, "Energy")."""
        m = self._m
        if m is None:
            return {"source": None, "missing": "the energy extension did not start"}
        self._build(self._t1_s if self._t1_s is not None else m.clock(), self._end_mj, self._rapl_end)
        return dict(self._section)

    def derivations(self) -> list[Derivation]:
        """J/token, J/sample, J/PFLOP (and gCO2 when a grid intensity is declared)."""
        return list(self._derivations)

    def tiles(self) -> list[dict[str, Any]]:
        """The energy tile (publisher thread; reads one dict reference)."""
        section = self._section
        if not section:
            return []
        return [energy_tile(section, (d.to_dict() for d in self._derivations))]
