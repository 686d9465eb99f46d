"""One run folder per launch, without a race; one seat per rank."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from trainmeter.ranks.seating import (
    PARENT_ENV,
    RUN_DIR_ENV,
    RankIdentity,
    inherited_run_dir,
    launch_dir,
    mark_parent_folder,
    take_seat,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def rank(k: int, world: int = 2, key: str | None = "world=2;MASTER_PORT=29500") -> RankIdentity:
    return RankIdentity(rank=k, local_rank=k, world_size=world, local_world_size=world, node_rank=0, node="n",
                        launch_key=key, backend=None, source="env")


def folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_every_rank_of_a_launch_gets_the_same_folder(tmp_path):
    a = launch_dir(tmp_path, "ddp", rank(0), NOW)
    b = launch_dir(tmp_path, "ddp", rank(1), NOW)
    assert a == b and folders(tmp_path) == ["20260102T030405Z-ddp"]


def test_ranks_racing_for_the_folder_agree_on_one(tmp_path):
    got: list[Path] = []
    threads = [threading.Thread(target=lambda k=k: got.append(launch_dir(tmp_path, "ddp", rank(k, 8), NOW)))
               for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and len(folders(tmp_path)) == 1


def test_a_second_launch_with_the_same_key_gets_its_own_folder(tmp_path):
    first = launch_dir(tmp_path, "ddp", rank(0), NOW)
    take_seat(first, rank(0))
    take_seat(first, rank(1))
    second = launch_dir(tmp_path, "ddp", rank(1), NOW)
    assert second != first
    assert launch_dir(tmp_path, "ddp", rank(0), NOW) == second


def test_no_launch_key_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a launch"):
        launch_dir(tmp_path, "ddp", rank(0, key=None), NOW)


def test_seats_are_rank_folders_and_never_shared(tmp_path):
    assert take_seat(tmp_path, rank(1), pid=10).name == "rank-1"
    assert take_seat(tmp_path, rank(1), pid=11).name == "rank-1-11"
    nobody = RankIdentity(rank=None, local_rank=None, world_size=1, local_world_size=None, node_rank=None,
                          node="n", launch_key=None, backend=None, source="none")
    assert take_seat(tmp_path, nobody, pid=12).name == "proc-12"


def test_the_exporting_parent_does_not_see_its_own_run_as_inherited(tmp_path):
    env = {RUN_DIR_ENV: str(tmp_path), PARENT_ENV: str(os.getpid())}
    mark_parent_folder(tmp_path)
    assert inherited_run_dir(env) is None
    assert inherited_run_dir(env, pid=os.getpid() + 1) == tmp_path
    assert inherited_run_dir({RUN_DIR_ENV: str(tmp_path / "gone"), PARENT_ENV: "1"}) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
@pytest.mark.parametrize("claim", ["fifo", "../../outside", "/etc"])
def test_a_hostile_claim_never_blocks_nor_seats_a_rank_outside_the_run_root(tmp_path, monkeypatch, claim):
    import trainmeter.ranks.seating as launch
    from trainmeter.ranks.seating import CLAIMS, claim_name

    monkeypatch.setattr(launch, "CLAIM_WAIT_S", 0.05)
    path = tmp_path / CLAIMS / claim_name("ddp", rank(0).launch_key, 0)
    path.parent.mkdir()
    if claim == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(claim + "\n")
    got = launch_dir(tmp_path, "ddp", rank(0), NOW)
    assert got.parent == tmp_path and got.name.endswith("-ddp")
