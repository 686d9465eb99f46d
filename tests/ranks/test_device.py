"""A rank's device by UUID: from torch's CUDA context when initialised, else the launcher's environment."""

from __future__ import annotations

from types import SimpleNamespace

from trainmeter.ranks.seating import rank_device


def fake_torch(*, initialised=True, current=1, reserved=(0, 0), uuids=("aaaa-1", "bbbb-2")):
    calls = []

    def props(i):
        calls.append(i)
        return SimpleNamespace(uuid=uuids[i])

    cuda = SimpleNamespace(is_initialized=lambda: initialised, current_device=lambda: current,
                           device_count=lambda: len(uuids), memory_reserved=lambda i: reserved[i],
                           get_device_properties=props)
    return SimpleNamespace(cuda=cuda), calls


def test_an_initialised_cuda_context_names_the_current_devices_uuid():
    torch, _ = fake_torch(current=1)
    d = rank_device({}, {"torch": torch})
    assert d["uuid"] == "GPU-bbbb-2" and d["cuda_ordinal"] == 1 and d["provenance"] == "detected"


def test_the_one_device_holding_memory_wins_over_the_current_device():
    torch, _ = fake_torch(current=0, reserved=(0, 4096))  # model.to("cuda:1") without set_device
    assert rank_device({}, {"torch": torch})["uuid"] == "GPU-bbbb-2"


def test_torch_without_a_cuda_context_has_no_device_and_none_is_created():
    torch, calls = fake_torch(initialised=False)
    assert rank_device({"LOCAL_RANK": "1"}, {"torch": torch}) is None and calls == []


def test_without_torch_local_rank_indexes_cuda_visible_devices():
    env = {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "GPU-AAA,GPU-BBB"}
    d = rank_device(env, {})
    assert d["uuid"] == "GPU-bbb" and d["provenance"] == "detected"
    d = rank_device({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "3,5"}, {})
    assert (d["uuid"], d["nvml_index"], d["provenance"]) == (None, 5, "assumed")
    d = rank_device({"LOCAL_RANK": "1"}, {})
    assert (d["nvml_index"], d["provenance"]) == (1, "assumed")
    assert rank_device({}, {}) is None and rank_device({"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "0"}, {}) is None
