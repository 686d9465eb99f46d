"""The ladder's model FLOP/s (docs/spec.md section 8, arithmetic intensity): the GPU wing reads it from the compute
wing's view (F x training-only tokens/s, the numerator of its MFU), on a fake NVML."""

from __future__ import annotations

import json
import threading

import pytest

from tests.conftest import tiny_model_and_data, train_steps
from tests.fakes.gpu.fake import FakeNvml, open_fake, sampler_step
from trainmeter.compute.view import ComputeView
from trainmeter.core.clock import FakeClock
from trainmeter.core.provenance import Derivation, Input
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.gpu.extension import GpuExtension
from trainmeter.options import make_options


class _Compute:
    """The compute wing as the GPU wing reads it: a view with MFU under ``hf`` (F 6e9 FLOP/token at 1e4 tokens/s)."""

    name, peak = "compute", None

    def view(self) -> ComputeView:
        inputs = (Input(name="F", value=6e9, unit="FLOP/token", provenance="detected"),
                  Input(name="tokens_per_s", value=1e4, unit="tokens/s", provenance="measured"),
                  Input(name="devices", value=1, unit="1", provenance="detected"),
                  Input(name="peak", value=1e14, unit="FLOP/s", provenance="declared"))
        mfu = Derivation(name="mfu[hf]", formula="F * tokens_per_s / (devices * peak)", value=0.6, unit="fraction",
                         inputs=inputs)
        return ComputeView(convention="hf", derived={"mfu[hf]": mfu})

    def start(self, monitor):
        pass

    def stop(self):
        pass


def _wait_open(ext: GpuExtension) -> None:
    for _ in range(500):
        if ext.sampler.indices:
            return
        threading.Event().wait(0.01)


def test_the_compute_view_gives_model_flop_per_s_as_the_numerator_of_its_mfu():
    flops = _Compute().view().flop_per_s()
    assert flops.value == 6e13 and flops.unit == "FLOP/s" and [i.name for i in flops.inputs] == ["F", "tokens_per_s"]
    assert ComputeView().flop_per_s() is None  # no convention named: no MFU, no numerator


def test_the_ladder_divides_the_compute_wings_flop_per_s_by_the_dram_traffic(tmp_path):
    clock = FakeClock(5.0)
    ext = GpuExtension(open_backend=lambda clock: open_fake(FakeNvml(["h100_sxm"], clock=clock)))
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, convention="hf"), clock=clock,
                     text=False, probes=False, extensions=[_Compute(), ext]).start()
    _wait_open(ext)
    for _ in range(4):  # GPM needs two samples a window apart
        clock.advance(0.5)
        sampler_step(ext.sampler, clock())
    m.finish("completed")
    intensity = ext.section["ladder"][0]["arithmetic_intensity"]
    flop = intensity["inputs"][0]
    assert flop["value"] == 6e13 and flop["provenance"] == "detected"  # F detected x tokens/s measured: the weaker
    assert "the numerator of mfu[hf] (compute's view)" in flop["source"]
    assert intensity["value"] == pytest.approx(6e13 / (0.35 * 3.35e12))  # the fake GEMM's DRAM util, H100's peak


def test_a_monitored_run_puts_its_model_flop_per_s_in_the_gpu_ladder(run_root):
    from trainmeter.api import run_monitored

    options = make_options(run_dir=run_root, interval_s=3600, widget=False, convention="hf", peak_tflops=0.001,
                           peak_source="test")
    exts = [GpuExtension(open_backend=lambda clock: open_fake(FakeNvml(["h100_sxm"], clock=clock)))
            if e.name == "gpu" else e for e in default_extensions(options)]
    model, opt, batches = tiny_model_and_data()
    with run_monitored(make_monitor(options, extensions=exts)) as m:
        train_steps(model, opt, batches)
    passport = json.loads((m.run_dir / "passport.json").read_text())
    mfu = next(d for d in passport["derivations"] if d["name"] == "mfu[hf]")
    inputs = {i["name"]: i["value"] for i in mfu["inputs"]}
    ladder = passport["gpu"]["ladder"]
    assert ladder[0]["arithmetic_intensity"]["inputs"][0]["value"] == pytest.approx(
        inputs["F"] * inputs["tokens_per_s"])
    assert m.extension("compute").flop_per_s().value == pytest.approx(inputs["F"] * inputs["tokens_per_s"])
