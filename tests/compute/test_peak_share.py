"""Peaks for a share of a card (docs/spec.md section 5): a MIG instance or a compute partition divides by its share
of the card's SMs; a vGPU profile, or a MIG instance whose share cannot be read, gets no peak and says why."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.compute.peak_lookup import match_card, why_no_peak
from trainmeter.compute.peaks import TABLE, peak_flops, peak_for_run

GIB = 1024**3

# MIG device names as NVML (nvmlDeviceGetName on the MIG handle) and torch (get_device_name on the instance) give
# them, an SM count the instance reads (A100: 14 per slice, 98 for 7g), the card and the card's full SM count.
MIG_NAMES = [
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 42, "A100 SXM4 40GB", 108),
    ("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 98, "A100 SXM4 40GB", 108),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 14, "A100 SXM4 80GB", 108),
    ("NVIDIA A100 80GB PCIe MIG 3g.40gb", 42, "A100 PCIe 80GB", 108),  # its 40gb is the slice's, not the card's
    ("NVIDIA A100-PCIE-40GB MIG 2g.10gb", 28, "A100 PCIe 40GB", 108),
    ("NVIDIA A30 MIG 1g.6gb", 14, "A30", 56),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, "H100 SXM", 132),
    ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", 16, "H100 SXM", 132),  # a compute instance inside a 3g instance
    ("NVIDIA H100 PCIe MIG 3g.40gb", 48, "H100 PCIe", 114),
    ("NVIDIA H100 NVL MIG 1g.12gb", 16, "H100 NVL", 132),
    ("NVIDIA H200 MIG 1g.18gb", 16, "H200 SXM", 132),
    ("NVIDIA H800 80GB HBM3 MIG 2g.20gb", 32, "H800 SXM", 132),
]

# vGPU profile names as the VM sees them (NVML and torch): time-sliced (Q, C, B, A series) and MIG-backed (A100-3-20C)
VGPU_NAMES = ["GRID A100-40C", "GRID A100X-4C", "NVIDIA A100-3-20C", "NVIDIA A10-4Q", "NVIDIA A10-24Q",
              "NVIDIA L4-24Q", "NVIDIA L4-6C", "GRID T4-16Q", "NVIDIA L40S-48Q", "NVIDIA A16-4Q", "NVIDIA H100XM-80C"]


@pytest.mark.parametrize(("name", "sms", "card", "card_sms"), MIG_NAMES, ids=[n for n, *_ in MIG_NAMES])
def test_a_mig_instance_gets_the_cards_peak_times_its_share_of_the_cards_sms(name, sms, card, card_sms):
    whole = next(r for r in TABLE if r.card == card)
    assert whole.sms == card_sms and match_card(name) == card
    peak = peak_flops(name, "bf16", sm_count=sms)
    assert peak.tflops == pytest.approx(whole.peaks["bf16"] * sms / card_sms)
    assert peak.card.startswith(f"{card}, MIG ") and f"({sms} of the card's {card_sms} SMs)" in peak.card
    assert peak.source.startswith(f"{sms} of the card's {card_sms} SMs (torch multi_processor_count")
    assert whole.source in peak.source and peak.provenance == "detected"


def test_a_slice_of_a_third_of_an_a100_divides_by_about_121_not_312_tflops():
    peak = peak_flops("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "bf16", sm_count=42)
    assert peak.tflops == pytest.approx(121.33, abs=0.01)
    assert peak.card == "A100 SXM4 40GB, MIG 3g.20gb (42 of the card's 108 SMs)"


@pytest.mark.parametrize(("name", "sms", "card", "card_sms"), MIG_NAMES[:3], ids=[n for n, *_ in MIG_NAMES[:3]])
def test_a_mig_instance_whose_sm_count_was_not_read_gets_no_peak_never_the_whole_cards(name, sms, card, card_sms):
    assert peak_flops(name) is None
    reason = why_no_peak(name)
    assert "is a MIG instance and its share of the card cannot be read" in reason
    assert "SM count was not read" in reason and "--peak-tflops X --peak-source TEXT" in reason


def test_a_mig_instance_of_a_card_whose_sm_count_the_table_lacks_gets_no_peak_saying_so():
    name = "NVIDIA B300 SXM6 AC MIG 1g.34gb"
    assert match_card(name) == "B300" and peak_flops(name, sm_count=18) is None
    assert "B300's SM count is not in the table" in why_no_peak(name, sm_count=18)


@pytest.mark.parametrize("name", VGPU_NAMES)
def test_a_vgpu_profile_gets_no_peak_and_says_its_share_cannot_be_read(name):
    for sms in (None, 108):
        assert peak_flops(name, sm_count=sms) is None
    assert match_card(name) is None
    reason = why_no_peak(name, sm_count=108)
    assert "is a vGPU profile" in reason and "cannot be read inside the VM" in reason
    assert "--peak-tflops X --peak-source TEXT" in reason


def test_an_amd_compute_partition_gets_its_share_of_the_cards_cus():
    peak = peak_flops("AMD Instinct MI300X", "bf16", sm_count=38)  # CPX mode: one XCD of eight per device
    assert peak.tflops == pytest.approx(1307.4 / 8) and peak.card == "MI300X, a partition (38 of the card's 304 CUs)"


def test_a_whole_card_reading_its_full_sm_count_or_more_keeps_the_cards_peak():
    for sms in (132, 140, None):
        peak = peak_flops("NVIDIA H100 80GB HBM3", sm_count=sms)
        assert peak.card == "H100 SXM" and peak.tflops == 989.5


def _compute_and_gpu(tmp_path, profile, clock):
    from tests.fakes.gpu.fake import FakeNvml, open_fake
    from trainmeter.compute.extension import ComputeExtension
    from trainmeter.extensions import make_monitor
    from trainmeter.gpu.extension import GpuExtension
    from trainmeter.options import make_options

    fake = FakeNvml([profile], clock=clock)
    compute, gpu = ComputeExtension(), GpuExtension(open_backend=lambda **_: open_fake(fake), node_wide=True)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600), clock=clock, text=False, probes=False,
                     extensions=[compute, gpu]).start()
    deadline = time.monotonic() + 10.0
    while m.extension("gpu").opening() and time.monotonic() < deadline:
        time.sleep(0.01)
    return m, compute


def _on_device(compute, name, uuid, sms, memory=10 * GIB):
    compute.device_name, compute.dtype = name, "bf16"
    compute._device_key = (memory, uuid, "torch.bfloat16", sms)  # what torch's device properties give
    compute._match_peak()


def test_the_compute_wing_divides_by_a_mig_instances_share_on_a_fake_mig_enabled_h100(tmp_path):
    """The fake NVML lists the instance (GPM per instance), so its torch UUID maps to the parent's identity."""
    from tests.fakes.gpu.fake import PROFILES
    from tests.fakes.gpu.fake_mig import mig_uuid
    from trainmeter.compute.mfu import mfu
    from trainmeter.core.clock import FakeClock

    m, compute = _compute_and_gpu(tmp_path, PROFILES["h100_mig_gpm"], FakeClock(0.0))
    try:
        assert m.extension("gpu").device_identity(mig_uuid(0, 1)[4:]).name == "NVIDIA H100 80GB HBM3"
        _on_device(compute, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", mig_uuid(0, 1)[4:], 16)
        peak = m.extension("compute").peak
        assert peak.tflops == pytest.approx(989.5 * 16 / 132) and compute.peak_missing is None
        source = next(i.source for i in mfu(6e9, 1e3, 1, peak).inputs if i.name == "peak")
        assert source.startswith("H100 SXM, MIG 1g.10gb (16 of the card's 132 SMs) dense bf16: 16 of the card's")
        _on_device(compute, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", mig_uuid(0, 1)[4:], None)
        assert compute.peak is None and "is a MIG instance" in compute.peak_missing
        assert mfu(6e9, 1e3, 1, None, peak_missing=compute.peak_missing).missing.startswith(
            "'NVIDIA H100 80GB HBM3 MIG 1g.10gb' is a MIG instance")
    finally:
        m.finish("completed")


def test_the_compute_wing_withholds_mfu_on_a_vgpu_profile_of_a_fake_card(tmp_path):
    from tests.fakes.gpu.fake import PROFILES, fake_uuid
    from trainmeter.core.clock import FakeClock

    vgpu = dataclasses.replace(PROFILES["a100"], name="GRID A100-40C", pci_device_id=0x20B0)
    m, compute = _compute_and_gpu(tmp_path, vgpu, FakeClock(0.0))
    try:
        _on_device(compute, "GRID A100-40C", fake_uuid(0)[4:], 108, memory=40 * GIB)
        assert compute.peak is None and "is a vGPU profile" in compute.peak_missing
        assert peak_for_run("GRID A100-40C", "bf16", gpu=m.extension("gpu"))[2] is False  # not waiting for NVML
    finally:
        m.finish("completed")
