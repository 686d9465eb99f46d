"""Energy per token from a fake NVML: the scripted counter, power integration where it is unsupported, RAPL."""

from __future__ import annotations

import json

import pytest

from tests.fakes.gpu.fake import GEMM, IDLE, FakeNvml, Phase, open_fake, sampler_step
from trainmeter.core.clock import FakeClock
from trainmeter.core.faults import MonitorWarning
from trainmeter.energy.extension import EnergyExtension, rapl_joules, read_rapl
from trainmeter.extensions import make_monitor
from trainmeter.gpu.sampler import GpuSampler, read_counters
from trainmeter.gpu.view import GpuView
from trainmeter.options import make_options

TIMELINE = (Phase(duration_s=10.0, levels=IDLE), Phase(duration_s=1e9, levels=GEMM))  # 60 W, then 650 W


class StubGpu:
    """The GPU extension's face the energy wing reads: ``name`` and the view of a (thread-less) sampler, whose energy
    counters are read at start and stop as its owner thread reads them at the open and before the close."""

    name = "gpu"

    def __init__(self, clock: FakeClock, devices: list[str], fault: str | None = None) -> None:
        self._fake = FakeNvml(devices, clock=clock, timelines={i: TIMELINE for i in range(len(devices))})
        if fault:
            for i in range(len(devices)):
                self._fake.inject(i, fault, field="total_energy_mj")
        self._clock = clock
        self.sampler = GpuSampler(self._fake, tuple(range(len(devices))), clock=clock, interval_s=0.5)

    def start(self, monitor) -> None:
        self.sampler.begin_window(monitor.clock())
        self.sampler.energy_start = read_counters(self._fake, self.sampler.indices), self._clock()

    def view(self) -> GpuView:
        return GpuView(readings=self.sampler)

    def stop(self) -> None:
        self.sampler.end_window(self._clock())
        self.sampler.energy_end = read_counters(self._fake, self.sampler.indices), self._clock()


def _opener(clock: FakeClock, devices: list[str], fault: str | None = None):
    def open_backend(clock=clock):
        fake = FakeNvml(devices, clock=clock, timelines={i: TIMELINE for i in range(len(devices))})
        if fault:
            for i in range(len(devices)):
                fake.inject(i, fault, field="total_energy_mj")
        return open_fake(fake)

    return open_backend


def _run(tmp_path, clock, gpu, energy, *, steps=100, tokens=1000, dt=1.0, sample=False, **flags):
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, **flags), clock=clock, text=False,
                     probes=False, extensions=[gpu, energy] if gpu is not None else [energy]).start()
    for _ in range(steps):
        clock.advance(dt)
        if sample:
            sampler_step(gpu.sampler, clock())
        m.on_step(tokens)
    m.finish("completed")
    return m, json.loads((m.run_dir / "passport.json").read_text())


def test_counter_is_differenced_over_the_session_and_j_per_token_is_pinned(tmp_path) -> None:
    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["h100_sxm", "h100_sxm"])
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    _, p = _run(tmp_path, clock, gpu, energy)
    e = p["energy"]
    # 100 s: 10 s at 60 W + 90 s at 650 W = 59,100 J per device, two devices
    assert e["source"] == "nvml_energy_counter"
    assert e["joules"] == pytest.approx(118_200.0)
    assert e["kwh"] == pytest.approx(118_200.0 / 3.6e6)
    assert e["avg_watts"] == {"0": pytest.approx(591.0), "1": pytest.approx(591.0)}
    assert e["j_per_token"] == pytest.approx(118_200.0 / 100_000)
    assert e["j_per_sample"] is None
    assert e["j_per_pflop"]["value"] is None and "--convention" in e["j_per_pflop"]["missing"]
    assert e["carbon"] is None
    assert "kWh" in e["markdown"] and "1.182 J/token" in e["markdown"]
    names = {d["name"] for d in p["derivations"]}
    assert {"j_per_token", "j_per_sample", "j_per_pflop"} <= names
    assert "- Energy: " in (p and (tmp_path.glob("*/passport.md").__next__()).read_text())


def test_unsupported_counter_falls_back_to_integrated_power_and_says_so(tmp_path) -> None:
    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["t4"], fault="not_supported")
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    _, p = _run(tmp_path, clock, gpu, energy, sample=True)
    e = p["energy"]
    assert e["source"] == "nvml_power_integrated"
    dev = e["devices"][0]
    assert dev["source"] == "nvml_power_integrated"
    assert "total energy counter: not supported" in dev["missing"]
    # samples at t=1..100 (one per step, 1 s apart): 9 at 60 W (t=1..9), 91 at 650 W; mean x 100 s
    mean_w = (9 * 60.0 + 91 * 650.0) / 100
    assert e["joules"] == pytest.approx(mean_w * 100.0)
    assert e["j_per_token"] == pytest.approx(mean_w * 100.0 / 100_000)


def test_unsupported_counter_without_power_samples_is_missing_with_both_reasons(tmp_path) -> None:
    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["t4"], fault="no_permission")
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    _, p = _run(tmp_path, clock, gpu, energy, sample=False)
    e = p["energy"]
    assert e["joules"] is None and e["j_per_token"] is None and e["source"] is None
    assert "no permission" in e["missing"] and "no power readings" in e["missing"]
    assert "not measured" in e["markdown"]


def test_per_pflop_uses_the_named_convention_and_carbon_only_when_declared(tmp_path) -> None:
    clock = FakeClock(0.0)

    class Compute:
        name = "compute"

        def __init__(self) -> None:
            from trainmeter.core.provenance import Derivation

            self.derived = {"flops_spent[megatron]": Derivation(name="flops_spent[megatron]", formula="", value=2e15,
                                                          unit="FLOP")}

        def start(self, m) -> None: ...

        def stop(self) -> None: ...

        def view(self):
            from trainmeter.compute.view import ComputeView

            return ComputeView(convention="megatron", derived=self.derived)

    gpu = StubGpu(clock, ["h100_sxm"])
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, convention="megatron", grid_gco2_per_kwh=400,
                                  grid_source="utility report 2025"),
                     clock=clock, text=False, probes=False, extensions=[Compute(), gpu, energy]).start()
    for _ in range(100):
        clock.advance(1.0)
        m.on_step(1000)
    m.finish("completed")
    e = json.loads((m.run_dir / "passport.json").read_text())["energy"]
    assert e["j_per_pflop"] == {"value": pytest.approx(59_100.0 / 2.0), "convention": "megatron", "missing": None}
    assert e["carbon"]["gco2"] == pytest.approx(59_100.0 / 3.6e6 * 400)
    assert e["carbon"]["provenance"] == "declared" and e["carbon"]["grid_source"] == "utility report 2025"


def test_live_tile_shows_j_per_token_so_far_with_its_derivation(tmp_path) -> None:
    clock = FakeClock(0.0)
    gpu = StubGpu(clock, ["h100_sxm"])
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[gpu, energy]).start()
    assert energy.tiles() == []
    for _ in range(20):
        clock.advance(1.0)
        sampler_step(gpu.sampler, clock())
        m.on_step(100)
    fields = energy.on_report(None)
    (tile,) = energy.tiles()
    # live, the counters are read at the end only: mean sampled power (9 at 60 W, 11 at 650 W) x 20 s
    assert fields["joules"] == pytest.approx((9 * 60.0 + 11 * 650.0) / 20 * 20.0)
    assert tile["value"] == pytest.approx(7690.0 / 2000) and tile["text"].endswith(" J/token")
    assert tile["derivation"]["formula"] == "energy_j / tokens"
    m.finish("completed")


def _powercap(root, energy_uj: int, *, readable: bool = True) -> None:
    for name, domain in (("package-0", "intel-rapl:0"), ("core", "intel-rapl:0:0"), ("psys", "intel-rapl:1")):
        d = root / domain
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "max_energy_range_uj").write_text("1000000000\n")
        if readable:
            (d / "energy_uj").write_text(f"{energy_uj}\n")
        elif (d / "energy_uj").exists():
            (d / "energy_uj").unlink()


def test_rapl_reads_package_domains_only_and_handles_a_wrap(tmp_path) -> None:
    _powercap(tmp_path, 999_000_000)
    first = read_rapl(tmp_path)
    assert list(first) == ["intel-rapl:0"]
    _powercap(tmp_path, 4_000_000)  # wrapped at 1e9 uJ
    assert rapl_joules(first, read_rapl(tmp_path)) == (pytest.approx(5.0), None)


def test_rapl_says_why_when_not_readable(tmp_path) -> None:
    _powercap(tmp_path, 0, readable=False)
    assert "not readable by this user" in read_rapl(tmp_path)
    assert "does not exist" in read_rapl(tmp_path / "nope")


def test_cpu_only_run_uses_rapl(tmp_path) -> None:
    clock = FakeClock(0.0)
    root = tmp_path / "powercap"
    _powercap(root, 1_000_000)

    class Rapl(EnergyExtension):
        def stop(self) -> None:
            _powercap(root, 51_000_000)  # 50 J over the run
            super().stop()

    _, p = _run(tmp_path / "runs", clock, None, Rapl(powercap_root=root), steps=10, tokens=100)
    e = p["energy"]
    assert e["source"] == "rapl" and e["joules"] == pytest.approx(50.0)
    assert e["j_per_token"] == pytest.approx(0.05) and e["avg_watts"] == {"cpu": pytest.approx(5.0)}


def test_cpu_only_run_without_rapl_says_so(tmp_path) -> None:
    clock = FakeClock(0.0)
    _, p = _run(tmp_path, clock, None, EnergyExtension(powercap_root=tmp_path / "nope"), steps=3)
    e = p["energy"]
    assert e["joules"] is None and "CPU: no RAPL here" in e["missing"]


def test_tile_of_a_sample_counting_run_says_j_per_sample_even_when_energy_is_missing() -> None:
    from trainmeter.energy.summary import energy_section, energy_tile

    section, derivations = energy_section(
        devices=[], gpu_missing="no GPU", rapl_j=None, rapl_missing="no RAPL", window_s=10.0, tokens=100,
        token_unit="samples", flops_spent=None, convention=None, flops_missing=None, grid_gco2_per_kwh=None,
        grid_source=None)
    tile = energy_tile(section, [d.to_dict() for d in derivations])
    assert tile["label"] == "Energy (J/sample)" and tile["value"] is None and "no RAPL" in tile["missing"]
    assert section["j_per_token"] is None and section["per"] == "sample"


def test_with_nvml_opened_in_the_background_the_counters_are_read_on_the_sampler_thread(tmp_path) -> None:
    """NVML opens on the GPU extension's own thread (docs/spec.md section 8): energy takes its counter reads."""
    import threading
    import time

    from trainmeter.gpu.extension import GpuExtension

    clock = FakeClock(0.0)
    calls: list[str] = []

    def opener(clock=clock):
        calls.append(threading.current_thread().name)
        return _opener(clock, ["h100_sxm"])(clock)

    gpu = GpuExtension(open_backend=opener)
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[gpu, energy]).start()
    deadline = time.monotonic() + 10
    while gpu.sampler.energy_start is None and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(100):
        clock.advance(1.0)
        m.on_step(1000)
    m.finish("completed")
    e = json.loads((m.run_dir / "passport.json").read_text())["energy"]
    assert calls and all(name != threading.current_thread().name for name in calls)  # never the training thread
    # 100 s from the open: 10 s at 60 W + 90 s at 650 W = 59,100 J
    assert e["source"] == "nvml_energy_counter"
    assert e["joules"] == pytest.approx(59_100.0)
    assert e["j_per_token"] == pytest.approx(59_100.0 / 100_000)


def test_with_no_nvml_in_the_background_the_final_reason_is_the_open_failure(tmp_path) -> None:
    from trainmeter.gpu.extension import GpuExtension

    def opener(clock=None):
        raise OSError("NVML library not found (libnvidia-ml.so.1)")

    clock = FakeClock(0.0)
    energy = EnergyExtension(powercap_root=tmp_path / "none")
    with pytest.warns(MonitorWarning, match="GPU sampling off"):
        _, p = _run(tmp_path, clock, GpuExtension(open_backend=opener), energy, steps=3)
    assert "being opened" not in json.dumps(p["energy"])
