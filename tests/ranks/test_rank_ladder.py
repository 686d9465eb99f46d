"""Each rank's ladder comes from its own device, found by UUID among the node sampler's devices."""

from __future__ import annotations

import json

from tests.fakes.gpu.fake import (
    GEMM,
    LYING_GPU_UTIL,
    FakeNvml,
    Phase,
    fake_uuid,
    open_fake,
    passport_of,
    sampler_for_run,
    sampler_step,
)
from trainmeter.core.clock import FakeClock
from trainmeter.ranks.merge import distributed_section, read_launch
from trainmeter.ranks.seating import this_node


def node_gpu_section() -> dict:
    """The node sampler's gpu section: GPU 0 busy with GEMMs, GPU 1 with GPU-Util 100% but SM activity 5%."""
    clock = FakeClock()
    fake = FakeNvml(["h100_sxm", "h100_sxm"], clock=clock,
                    timelines={0: (Phase(duration_s=1e9, levels=GEMM),),
                               1: (Phase(duration_s=1e9, levels=LYING_GPU_UTIL),)})
    sampler = sampler_for_run(None, clock=clock, open_backend=lambda clock: open_fake(fake), cuda_uuids=None,
                                 env={})
    sampler.begin_window(0.0)
    for _ in range(5):
        sampler_step(sampler, clock())
        clock.advance(0.5)
    return json.loads(json.dumps(passport_of(sampler)))


def seat(root, k, *, device, gpu=None, mfu=None):
    d = root / f"rank-{k}"
    d.mkdir(parents=True)
    ident = {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": this_node(), "pid": None}
    (d / "events.jsonl").write_text(json.dumps({"kind": "start"}) + "\n" + json.dumps(ident) + "\n")
    passport = {"name": "ddp", "status": "completed", "steps": 5, "tokens": 50, "elapsed_s": 1.0,
                "compute": {"convention": "hf", "mfu": {"hf": mfu}, "mfu_missing": None if mfu else "no peak"},
                "distributed": {"role": "rank", "backend": "nccl", "device": device}}
    if gpu is not None:
        passport["gpu"] = gpu
    (d / "passport.json").write_text(json.dumps(passport))


def uuid_device(index: int) -> dict:
    return {"uuid": fake_uuid(index), "cuda_ordinal": 0, "nvml_index": None, "how": "test", "provenance": "detected"}


def test_two_ranks_on_one_node_each_get_their_own_devices_ladder(tmp_path):
    # rank 0 (the node sampler) trains on NVML device 1, rank 1 on device 0: matched by UUID, not by rank
    seat(tmp_path, 0, device=uuid_device(1), gpu=node_gpu_section(), mfu=0.01)
    seat(tmp_path, 1, device=uuid_device(0), mfu=0.45)
    ladder = distributed_section(read_launch(tmp_path))["gpu_ladder"]
    rows = {row["rank"]: row for row in ladder["ranks"]}
    assert (rows[0]["index"], rows[0]["uuid"]) == (1, fake_uuid(1))
    assert (rows[1]["index"], rows[1]["uuid"]) == (0, fake_uuid(0))
    assert rows[0]["rungs"]["gpu_util"]["value"] == 1.0 and rows[0]["rungs"]["sm_activity"]["value"] < 0.1
    assert rows[0]["falloff"] == "sm_activity" and "launch-bound" in rows[0]["sentence"]
    assert rows[1]["rungs"]["sm_activity"]["value"] > 0.9 and rows[1]["rungs"]["tensor_activity"]["value"] > 0.5
    assert rows[1]["rungs"]["mfu"]["value"] == 0.45 and rows[1]["falloff"] is None
    assert rows[0]["matched"] == "matched by UUID" and ladder["missing"] == []
    assert [d["uuid"] for d in ladder["nodes"][this_node()]] == [fake_uuid(0), fake_uuid(1)]


def test_a_rank_without_a_device_or_with_an_unsampled_one_says_why(tmp_path):
    seat(tmp_path, 0, device=uuid_device(0), gpu=node_gpu_section())
    seat(tmp_path, 1, device={"uuid": "GPU-ffffffff-0000-4000-8000-000000000009", "nvml_index": None})
    ladder = distributed_section(read_launch(tmp_path))["gpu_ladder"]
    assert [row["rank"] for row in ladder["ranks"]] == [0]
    assert ladder["missing"] == ["rank 1: its device GPU-ffffffff-0000-4000-8000-000000000009 is not among the "
                                 "devices its node's sampler read"]


def test_an_assumed_nvml_index_is_matched_by_index_and_says_so(tmp_path):
    seat(tmp_path, 0, device=uuid_device(0), gpu=node_gpu_section())
    seat(tmp_path, 1, device={"uuid": None, "nvml_index": 1, "how": "LOCAL_RANK as the CUDA ordinal",
                              "provenance": "assumed"})
    rows = {r["rank"]: r for r in distributed_section(read_launch(tmp_path))["gpu_ladder"]["ranks"]}
    assert rows[1]["index"] == 1 and rows[1]["matched"].startswith("matched by NVML index 1")


def test_no_node_sampler_record_means_no_ladder_section(tmp_path):
    seat(tmp_path, 0, device=uuid_device(0))
    assert distributed_section(read_launch(tmp_path))["gpu_ladder"] is None


def test_a_monitored_parent_gives_its_ranks_the_ladders_of_its_own_node_sampler(tmp_path):
    from types import SimpleNamespace

    from trainmeter.ranks.extension import RanksExtension

    seat(tmp_path, 0, device=uuid_device(0), mfu=0.3)
    seat(tmp_path, 1, device=uuid_device(1), mfu=0.3)
    from trainmeter.gpu.view import GpuView

    gpu = GpuView(section=node_gpu_section())  # the GPU wing's view: its passport section, built just before
    warnings: list[str] = []
    parent = SimpleNamespace(run_dir=tmp_path, extension={"gpu": gpu}.get, token_unit="tokens", steps=0,
                             note_warning=warnings.append, options=SimpleNamespace(convention="hf"))
    ext = RanksExtension()
    ext._monitor = parent
    ext._section = ext._merge(parent)
    assert ext._section["gpu_ladder"] is None  # the ranks' passports hold no node sampler's section
    rows = {r["rank"]: r for r in ext.passport_section()["gpu_ladder"]["ranks"]}
    assert (rows[0]["uuid"], rows[1]["uuid"]) == (fake_uuid(0), fake_uuid(1))
    assert rows[1]["falloff"] == "sm_activity" and rows[0]["falloff"] is None


def test_a_ranks_own_mfu_rung_takes_the_weakest_provenance_of_its_passports_mfu_derivation(tmp_path):
    seat(tmp_path, 0, device=uuid_device(0), gpu=node_gpu_section(), mfu=0.4)
    passport_path = tmp_path / "rank-0" / "passport.json"
    passport = json.loads(passport_path.read_text())
    passport["derivations"] = [{"name": "mfu[hf]", "inputs": [{"name": "F", "provenance": "detected"},
                                                             {"name": "tokens_per_s", "provenance": "measured"},
                                                             {"name": "peak", "provenance": "declared"}]}]
    passport_path.write_text(json.dumps(passport))
    row = distributed_section(read_launch(tmp_path))["gpu_ladder"]["ranks"][0]
    assert row["rungs"]["mfu"]["value"] == 0.4 and row["rungs"]["mfu"]["provenance"] == "declared"
