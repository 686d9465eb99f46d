"""One checkpoint per outermost save, for the savers that bind theirs at import (accelerate) and for DCP."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

import trainmeter as tm  # noqa: E402


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def test_accelerate_save_state_is_one_checkpoint_however_many_files_it_writes(run_root, tmp_path):
    accelerate = pytest.importorskip("accelerate")
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        accelerator = accelerate.Accelerator(cpu=True)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        accelerator.save_state(str(tmp_path / "state"))
    p = _passport(m)
    files = [f for f in (tmp_path / "state").rglob("*") if f.is_file()]
    assert len(files) >= 2  # model, optimizer, RNG state: several files, one checkpoint
    assert p["time"]["checkpoint_saves"] == 1
    [record] = p["checkpoints"]
    assert record["source"] == "accelerate save_state" and record["step"] == 1
    assert record["bytes"] == sum(f.stat().st_size for f in files) and record["seconds"] > 0


def test_torch_distributed_checkpoint_save_is_a_checkpoint(run_root, tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from tests.field.conftest import Sleeper, within

    model = torch.nn.Linear(4, 1)
    t0 = time.perf_counter()  # a bare save first: its lazy imports warmed, its own work timed on this machine's load
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(tmp_path / "bare"))
    bare_s = time.perf_counter() - t0
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:  # the sleeper is pickled inside the save
        dcp.save({"model": model.state_dict(), "extra": Sleeper(0.6)}, checkpoint_id=str(tmp_path / "dcp"))
    p = _passport(m)
    [record] = p["checkpoints"]
    assert record["source"] == "torch.distributed.checkpoint" and record["path"] == str(tmp_path / "dcp")
    assert record["bytes"] > 0 and within(p["phases_s"]["checkpoint"], 0.6, bare_s), p["phases_s"]
    assert record["seconds"] == pytest.approx(p["phases_s"]["checkpoint"], rel=0.05)


def test_two_top_level_torch_saves_are_two_checkpoints(run_root, tmp_path):
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        torch.save({"a": 1}, tmp_path / "a.pt")
        torch.save({"b": 2}, tmp_path / "b.pt")
    p = _passport(m)
    assert [r["source"] for r in p["checkpoints"]] == ["torch.save", "torch.save"]  # two top-level saves: two


def test_a_stable_baselines3_save_is_one_record_of_the_zip_file_it_writes(run_root, tmp_path):
    sb3 = pytest.importorskip("stable_baselines3")
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
        model.save(tmp_path / "ppo")  # its torch.save calls write into the zip: nested, not checkpoints
    [record] = _passport(m)["checkpoints"]
    assert record["path"] == str(tmp_path / "ppo.zip") and record["source"] == "stable-baselines3 save"
    assert record["bytes"] == (tmp_path / "ppo.zip").stat().st_size


def test_a_skorch_checkpoint_is_one_record_of_the_files_it_writes(run_root, tmp_path):
    skorch = pytest.importorskip("skorch")
    from skorch.callbacks import Checkpoint

    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)).numpy()
    net = skorch.NeuralNetRegressor(torch.nn.Linear(4, 1), max_epochs=2, train_split=None, verbose=0,
                                    callbacks=[Checkpoint(dirname=str(tmp_path / "ck"), monitor=None)])
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        net.fit(x, x.sum(1, keepdims=True))
        net.save_params(f_params=str(tmp_path / "params.pt"))
    records = _passport(m)["checkpoints"]
    assert [(r["path"], r["source"]) for r in records] == [(str(tmp_path / "ck"), "skorch Checkpoint")] * 2 + [
        (str(tmp_path / "params.pt"), "skorch save_params")]
    files = [f for f in (tmp_path / "ck").iterdir() if f.is_file()]  # params, optimizer, criterion, history
    assert len(files) == 4 and records[-2]["bytes"] == sum(f.stat().st_size for f in files)
    assert records[-1]["bytes"] == (tmp_path / "params.pt").stat().st_size


def test_a_temp_file_renamed_in_a_hand_loop_is_one_record_of_the_final_file(run_root, tmp_path):
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:  # the atomic-save idiom
        torch.save({"w": torch.ones(32)}, tmp_path / "model.pt.tmp")
        (tmp_path / "model.pt.tmp").replace(tmp_path / "model.pt")
    [record] = _passport(m)["checkpoints"]
    assert record["path"] == str(tmp_path / "model.pt") and record["source"] == "torch.save"
    assert record["bytes"] == (tmp_path / "model.pt").stat().st_size and record["seconds"] > 0
