"""Rank identity from the launchers' environment and from torch.distributed."""

from __future__ import annotations

from trainmeter.ranks.seating import detect_identity, launch_key

TORCHRUN = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}


class FakeDist:
    def __init__(self, rank: int, world: int, backend: str = "gloo", up: bool = True) -> None:
        self.rank, self.world, self.backend, self.up = rank, world, backend, up

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.up

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world

    def get_backend(self) -> str:
        return self.backend


def test_torchrun_environment_gives_rank_node_and_launch_key():
    ident = detect_identity(TORCHRUN, dist=FakeDist(0, 1, up=False))
    assert (ident.rank, ident.local_rank, ident.world_size, ident.local_world_size, ident.node_rank) == (3, 1, 4, 2, 1)
    assert ident.source == "torchrun" and ident.distributed
    assert "TORCHELASTIC_RUN_ID=abc" in ident.launch_key and "MASTER_PORT=29500" in ident.launch_key
    assert ident.to_dict()["provenance"] == "detected"


def test_slurm_is_read_when_torchrun_variables_are_absent():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
           "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    ident = detect_identity(env, dist=FakeDist(0, 1, up=False))
    assert (ident.rank, ident.world_size, ident.local_rank, ident.node_rank, ident.source) == (5, 8, 1, 2, "slurm")
    assert "SLURM_JOB_ID=77" in ident.launch_key


def test_an_initialised_process_group_wins_over_the_environment_and_gives_the_backend():
    ident = detect_identity({"RANK": "0", "WORLD_SIZE": "2"}, dist=FakeDist(1, 2, "nccl"))
    assert (ident.rank, ident.world_size, ident.backend, ident.source) == (1, 2, "nccl", "torch.distributed")


def test_no_launch_means_one_process_with_no_rank():
    ident = detect_identity({}, dist=FakeDist(0, 1, up=False))
    assert ident.rank is None and ident.world_size == 1 and not ident.distributed
    assert ident.launch_key is None and ident.to_dict()["provenance"] == "assumed"


def test_local_rank_follows_from_the_local_world_size_when_missing():
    ident = detect_identity({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, dist=FakeDist(0, 1, up=False))
    assert ident.local_rank == 1


def test_a_bad_number_is_ignored_rather_than_raised():
    ident = detect_identity({"RANK": "x", "WORLD_SIZE": "2"}, dist=FakeDist(0, 1, up=False))
    assert ident.rank is None


def test_launch_key_is_none_without_anything_shared():
    assert launch_key({}, 2) is None
    assert launch_key({"MASTER_PORT": "1"}, 2) == "world=2;MASTER_PORT=1"


def test_the_node_is_a_hash_label_never_the_host_name():
    import socket

    ident = detect_identity(TORCHRUN, dist=FakeDist(0, 1, up=False))
    assert ident.node.startswith("node-") and len(ident.node) == 13
    assert socket.gethostname() not in ident.node
