"""The ranks extension in one process: the parent's export, a rank's seat, fork handlers."""

from __future__ import annotations

import json
import os
import threading

import torch

import trainmeter as tm
from trainmeter.core import monitor as monitor_module
from trainmeter.ranks import fork
from trainmeter.ranks.seating import PARENT_ENV, RUN_DIR_ENV


def steps(n: int) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()


def test_a_parent_exports_its_run_folder_while_it_runs_and_restores_the_environment(run_root, monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    with tm.monitor(name="parent", run_dir=run_root) as m:
        assert os.environ[RUN_DIR_ENV] == str(m.run_dir)
        assert os.environ[PARENT_ENV] == str(os.getpid())
        steps(2)
    assert RUN_DIR_ENV not in os.environ and PARENT_ENV not in os.environ
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert "distributed" not in passport  # a plain run: nothing to merge, nothing forked


def test_a_rank_takes_its_seat_times_its_steps_and_leaves_torch_as_found(run_root, monkeypatch):
    from torch.optim import optimizer

    for key in (RUN_DIR_ENV, PARENT_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29999")
    backward, hooks = torch.Tensor.backward, dict(optimizer._global_optimizer_post_hooks)
    with tm.monitor(name="ddp", run_dir=run_root, interval_s=0.1) as m:
        steps(4)
    assert m.run_dir.name == "rank-1" and m.run_dir.parent.parent == run_root
    assert not m.text  # only rank 0 prints the text line
    assert torch.Tensor.backward is backward and dict(optimizer._global_optimizer_post_hooks) == hooks
    own = json.loads((m.run_dir / "passport.json").read_text())
    assert own["distributed"]["role"] == "rank" and own["distributed"]["identity"]["rank"] == 1
    assert own["distributed"]["timing"]["timed_steps"] == 3
    launch = json.loads((m.run_dir.parent / "passport.json").read_text())  # no parent: the ranks merge
    assert launch["status"] == "unfinished" and launch["steps"] == 4
    assert "no record from rank(s) 0 of world size 2" in launch["warnings"]


def test_no_lock_of_the_run_is_held_across_a_fork(run_root):
    with tm.monitor(name="locks", run_dir=run_root) as m:
        steps(1)
        tm.emit(lr=0.1)
        fork._before()
        locks = m.locks()
        assert locks and all(lock.locked() for lock in locks)  # taken by the forking thread, not a sampler
        fork._after_in_parent()
        assert not any(lock.locked() for lock in locks)
    assert fork.forks_seen() >= 1


def test_a_forked_child_run_writes_nothing_to_the_parent_until_it_steps(run_root, tmp_path):
    with tm.monitor(name="parent", run_dir=run_root) as m:
        steps(2)
        size = (m.run_dir / "events.jsonl").stat().st_size
        pid = os.fork()
        if pid == 0:  # the child: its run is re-homed; exit without stepping
            ok = monitor_module._ACTIVE is m and m.steps == 0 and m.run_dir is None and not m.text
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (m.run_dir / "events.jsonl").stat().st_size >= size
    assert [p.name for p in m.run_dir.iterdir() if p.is_dir()] == []  # the child never stepped: no seat


def test_a_forked_child_starts_with_no_held_loss_pending_loss_queued_emit_or_series_info(run_root, tmp_path):
    from trainmeter.core.scalars import StepLoss

    with tm.monitor(name="parent", run_dir=run_root) as m:
        steps(5)  # the loss of step 5 is held until step 6
        tm.emit(train_loss=2.0)  # series_info: the cell's own loss
        m.steps_state.add_loss(StepLoss.read("train_loss.optimizer2", 3.0))  # a pending loss, flushed at the next step
        emitter = threading.Thread(target=lambda: tm.emit(from_thread=1.0))  # queued for the training thread
        emitter.start()
        emitter.join()
        seen = tmp_path / "child.json"
        pid = os.fork()
        if pid == 0:  # the child: train two steps of its own, then say what its run holds (past the parent's step 5)
            try:
                info = dict(m.series_info)
                steps(7)
                loss = m.series.get("train_loss")
                seen.write_text(json.dumps({
                    "series_info": sorted(info),
                    "series": sorted(m.series),
                    "loss_steps": loss.read(0)[1] if loss is not None else [],
                }))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child = json.loads(seen.read_text())
    assert child["series_info"] == [], child
    assert "train_loss.optimizer2" not in child["series"] and "from_thread" not in child["series"]
    assert child["loss_steps"] == [1, 2, 3, 4, 5, 6]  # the child's own steps (step 7's is held): none of the parent's


def test_a_plain_run_after_a_rank_run_in_the_same_process_is_not_a_rank(run_root, monkeypatch):
    from trainmeter.ranks.seating import current_seat, seat_for

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29998")
    from datetime import datetime, timezone

    assert seat_for(run_root, "x", datetime.now(timezone.utc)) is not None
    for key in ("RANK", "WORLD_SIZE", "MASTER_PORT", RUN_DIR_ENV):
        monkeypatch.delenv(key, raising=False)
    with tm.monitor(name="plain", run_dir=run_root) as m:
        assert current_seat() is None and next(e for e in m.extensions if e.name == "distributed").role == "parent"
    assert not m.run_dir.name.startswith("rank-")


def test_the_live_view_of_a_parent_shows_its_ranks_panel(run_root):
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    with tm.monitor(name="parent", run_dir=run_root) as m:
        seat = m.run_dir / "rank-0"
        seat.mkdir()
        (seat / "events.jsonl").write_text(json.dumps({"kind": "rank", "rank": 0, "node": "elsewhere"}) + "\n"
                                           + json.dumps({"kind": "interval", "step": 12, "tokens": 48}) + "\n")
        state = build_state(facts_from_monitor(m.context))
    (panel,) = [p for p in state["panels"] if p["id"] == "ranks"]
    assert panel["rows"][0]["label"] == "rank 0" and panel["rows"][0]["value"] == 12


def test_a_parent_without_seat_folders_reads_no_run_log_for_its_ranks_panel(run_root, monkeypatch):
    from trainmeter.ranks import follow

    def no_follower(*args, **kwargs):
        raise AssertionError("a run log was followed for a run without seats")

    monkeypatch.setattr(follow, "RunFollower", no_follower)
    with tm.monitor(name="alone", run_dir=run_root) as m:
        steps(2)
        ext = next(e for e in m.extensions if e.name == "distributed")
        assert ext.panels() == [] and ext.tiles() == []
    assert json.loads((m.run_dir / "dashboard.json").read_text())["panels"] is not None


def test_dataloader_workers_forked_during_a_run_leave_no_trace(run_root):
    data = torch.utils.data.TensorDataset(torch.randn(32, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="fork")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(name="loader", run_dir=run_root, interval_s=0.1) as m:
        for _ in range(2):
            for (x,) in loader:
                model(x).sum().backward()
                opt.step()
    assert m.steps == 8 and [p for p in m.run_dir.iterdir() if p.is_dir()] == []
    passport = json.loads((m.run_dir / "passport.json").read_text())
    assert passport["steps"] == 8 and "distributed" not in passport


def test_spawned_children_that_record_nothing_are_named_in_the_parent_passport(run_root):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with tm.monitor(name="parent", run_dir=run_root) as m:
        child = ctx.Process(target=os.getpid)  # a child that imports nothing of ours and trains nothing
        child.start()
        child.join()
    from multiprocessing import popen_spawn_posix

    assert not hasattr(popen_spawn_posix.Popen._launch, "__wrapped__")  # the counting patch is gone
    section = json.loads((m.run_dir / "passport.json").read_text())["distributed"]
    assert section["children_spawned"] == 1 and section["role"] == "parent"
    assert "1 child process(es) were started with the spawn method and 0 recorded as ranks" in section["note"]


def test_a_rank_writes_its_compute_inputs_and_device_for_the_launchs_mfu(run_root, monkeypatch):
    for key in (RUN_DIR_ENV, PARENT_ENV, "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29997")
    with tm.monitor(name="ddp", run_dir=run_root, interval_s=0.1, convention="hf", peak_tflops=100.0,
                    peak_source="declared for the test") as m:
        model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            model(torch.randint(0, 16, (2, 5))).sum().backward()
            opt.step()
    records = [json.loads(line) for line in (m.run_dir / "events.jsonl").read_text().splitlines()]
    fields = [r["distributed"] for r in records if r["kind"] == "interval"][-1]
    assert fields["device"] is None  # torch is imported and CUDA never initialised: no GPU, none created
    compute = fields["compute"]
    assert compute["convention"] == "hf" and compute["peak_flops_per_s"] == 100e12
    assert compute["flops_per_token"]["hf"] > 0 and "declared for the test" in compute["peak_text"]
    launch = json.loads((m.run_dir.parent / "passport.json").read_text())["distributed"]
    assert launch["mfu_devices"] == 2 and launch["mfu_session"]["hf"] is None
    assert launch["mfu_missing"].startswith("no record from rank(s) 1 of world size 2")


def test_a_run_names_only_the_forks_made_during_it_not_an_earlier_runs(run_root):
    with tm.monitor(name="forks", run_dir=run_root) as first:
        fork._before()  # what os.fork runs around a fork: one child forked while this run is monitored
        fork._after_in_parent()
    with tm.monitor(name="after", run_dir=run_root) as second:
        torch.nn.Linear(4, 1)(torch.randn(2, 4))
    forked = json.loads((first.run_dir / "passport.json").read_text())["distributed"]
    assert (forked["role"], forked["children_forked"]) == ("parent", 1)
    assert "distributed" not in json.loads((second.run_dir / "passport.json").read_text())
    assert not any("forked" in w for w in second.warnings)


def test_a_one_process_run_finishes_without_loading_the_merge() -> None:
    from tests.widget.test_dashboard_file import headless_run

    run_dir, loaded = headless_run(("trainmeter.ranks.merge",))
    assert loaded == [] and "distributed" not in json.loads(open(f"{run_dir}/passport.json").read())
