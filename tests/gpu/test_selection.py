"""--gpus parsing and the default device selection (CUDA context by UUID, CVD, all)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainmeter.gpu.backend import GpuDeviceInfo
from trainmeter.gpu.selection import (
    GpusSpec,
    cuda_context_uuids,
    parse_gpus,
    select_gpus,
)

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-bbbb2222-0000-0000-0000-000000000000",
    "GPU-cccc3333-0000-0000-0000-000000000000",
]
DEVICES = [GpuDeviceInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=u) for i, u in enumerate(UUIDS)]


def test_parse_all_indices_and_uuids() -> None:
    assert parse_gpus("all") == GpusSpec(all=True)
    assert parse_gpus(" 0, 1 ,1") == GpusSpec(entries=(0, 1))
    assert parse_gpus("GPU-AAAA1111-0000") == GpusSpec(entries=("GPU-aaaa1111-0000",))
    assert parse_gpus([2, "GPU-bbbb2222-0000"]) == GpusSpec(entries=(2, "GPU-bbbb2222-0000"))
    assert parse_gpus(1) == GpusSpec(entries=(1,))
    assert parse_gpus(None) is None


@pytest.mark.parametrize("bad", ["cuda:0", "0,,1", "", "-1", "gpu0"])
def test_parse_rejects_bad_value_naming_it_and_what_is_valid(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gpus(bad)
    assert "valid: 'all'" in str(info.value)


def test_parse_rejects_mig_uuid_as_unsupported() -> None:
    with pytest.raises(ValueError, match="MIG"):
        parse_gpus("MIG-1234abcd-0000")


def test_parse_rejects_bool_and_negative_int() -> None:
    with pytest.raises(ValueError):
        parse_gpus(True)
    with pytest.raises(ValueError, match="negative"):
        parse_gpus([-2])


def test_declared_indices_and_uuids_resolve_to_nvml_indices() -> None:
    sel = select_gpus(parse_gpus("2,GPU-aaaa1111"), DEVICES, env={})
    assert sel.indices == (0, 2) and sel.provenance == "declared"


def test_declared_index_out_of_range_lists_valid_devices() -> None:
    with pytest.raises(ValueError) as info:
        select_gpus(parse_gpus("7"), DEVICES, env={})
    assert "there is no GPU 7" in str(info.value) and "indices 0-2" in str(info.value)
    assert UUIDS[0] in str(info.value)


def test_declared_unknown_uuid_is_rejected() -> None:
    with pytest.raises(ValueError, match="matches no GPU"):
        select_gpus(parse_gpus("GPU-ffff"), DEVICES, env={})


def test_default_uses_cuda_context_devices_mapped_by_uuid() -> None:
    sel = select_gpus(None, DEVICES, cuda_uuids=[UUIDS[2]], env={"CUDA_VISIBLE_DEVICES": "0"})
    assert sel.indices == (2,) and sel.provenance == "detected"
    assert "CUDA context" in sel.how


def test_default_notes_cuda_devices_nvml_cannot_see_and_mig_instances() -> None:
    sel = select_gpus(None, DEVICES, cuda_uuids=["GPU-99999999", "MIG-12345678"], env={})
    assert sel.indices == ()
    assert any("not among the NVML devices" in n for n in sel.notes)
    assert any("MIG" in n for n in sel.notes)


def test_default_without_context_follows_cuda_visible_devices_uuids() -> None:
    sel = select_gpus(None, DEVICES, env={"CUDA_VISIBLE_DEVICES": f"{UUIDS[1]}"})
    assert sel.indices == (1,) and sel.provenance == "detected"


def test_default_with_cvd_indices_is_assumed_unless_pci_bus_order() -> None:
    guessed = select_gpus(None, DEVICES, env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert guessed.indices == (0, 2) and guessed.provenance == "assumed"
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in guessed.notes)
    exact = select_gpus(None, DEVICES, env={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert exact.indices == (1,) and exact.provenance == "detected"


def test_cvd_stops_at_first_invalid_entry_like_cuda() -> None:
    sel = select_gpus(None, DEVICES, env={"CUDA_VISIBLE_DEVICES": "1,9,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert sel.indices == (1,)


def test_empty_cvd_hides_every_gpu() -> None:
    sel = select_gpus(None, DEVICES, env={"CUDA_VISIBLE_DEVICES": ""})
    assert sel.indices == () and "hides every GPU" in sel.notes[0]


def test_default_without_context_or_cvd_is_every_device() -> None:
    sel = select_gpus(None, DEVICES, env={})
    assert sel.indices == (0, 1, 2) and sel.provenance == "assumed"


def test_mig_enabled_device_in_selection_gets_a_note() -> None:
    devices = [GpuDeviceInfo(index=0, name="NVIDIA H100 80GB HBM3", uuid=UUIDS[0], mig_enabled=True)]
    sel = select_gpus(parse_gpus("all"), devices, env={})
    assert sel.indices == (0,) and "MIG mode" in sel.notes[0]


def _fake_torch(initialised: bool, current: int, reserved: list[int], uuids: list[str]) -> SimpleNamespace:
    cuda = SimpleNamespace(
        is_initialized=lambda: initialised,
        current_device=lambda: current,
        device_count=lambda: len(reserved),
        memory_reserved=lambda i: reserved[i],
        get_device_properties=lambda i: SimpleNamespace(uuid=uuids[i]),
    )
    return SimpleNamespace(cuda=cuda)


def test_cuda_context_uuids_are_current_device_and_devices_holding_memory() -> None:
    torch = _fake_torch(True, 0, [0, 0, 1024], ["aaaa1111-0000", "bbbb2222-0000", "cccc3333-0000"])
    assert cuda_context_uuids({"torch": torch}) == ["GPU-aaaa1111-0000", "GPU-cccc3333-0000"]


def test_cuda_context_uuids_none_without_torch_or_initialised_cuda() -> None:
    assert cuda_context_uuids({}) is None
    assert cuda_context_uuids({"torch": _fake_torch(False, 0, [0], ["x"])}) is None


def test_cuda_context_uuids_never_raises() -> None:
    broken = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: 1 / 0))
    assert cuda_context_uuids({"torch": broken}) is None


def test_cuda_context_uuids_with_real_cpu_torch_is_none() -> None:
    import torch  # noqa: F401 - the CPU build: CUDA never initialised

    assert cuda_context_uuids() is None


def test_a_cuda_context_on_a_mig_instance_selects_its_parent_gpu() -> None:
    parent = GpuDeviceInfo(index=1, name="NVIDIA H100 80GB HBM3", uuid=UUIDS[1], mig_enabled=True,
                           mig_instances=((3, "MIG-abcd0000-1111"),))
    devices = [DEVICES[0], parent]
    sel = select_gpus(None, devices, cuda_uuids=["MIG-ABCD0000-1111"], env={})
    assert sel.indices == (1,)
    assert any("MIG GPU instance 3 of GPU 1" in n for n in sel.notes)
    cvd = select_gpus(None, devices, env={"CUDA_VISIBLE_DEVICES": "MIG-abcd0000-1111"})
    assert cvd.indices == (1,)
    as_torch_prints_it = select_gpus(None, devices, cuda_uuids=["GPU-abcd0000-1111"], env={})  # no MIG- prefix
    assert as_torch_prints_it.indices == (1,)
    unknown = select_gpus(None, devices, cuda_uuids=["MIG-99999999"], env={})
    assert unknown.indices == () and any("is a MIG instance" in n for n in unknown.notes)
