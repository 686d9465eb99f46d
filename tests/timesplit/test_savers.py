"""The saver table: where each saver writes, what a record holds, a folder's size bounded."""

from __future__ import annotations

import io

from trainmeter.core import checkpoint_files
from trainmeter.timesplit import savers


def _record(where, step, seconds, source, written=(), run_dir=None):
    found = savers.located(where, written)
    return None if found is None else savers.entry(found, step, seconds, source, run_dir)


def _site(source):
    return next(s for s in savers.SITES if s.source == source)


def test_each_saver_names_where_it_writes_from_its_own_arguments():
    class Trainer:
        class args:
            output_dir = "out"

        class state:
            global_step = 7

    assert _site("transformers Trainer checkpoint").where((Trainer(), None), {}, None) == "out/checkpoint-7"
    assert _site("transformers Trainer.save_model").where((Trainer(),), {}, None) == "out"
    assert _site("peft save_pretrained").where((object(), "adapter"), {}, None) == "adapter"
    assert _site("accelerate save_state").where((object(),), {}, "state/dir") == "state/dir"
    assert _site("fastai Learner.save").where((object(), "m"), {}, "models/m.pth") == "models/m.pth"
    dcp = next(s for s in savers.SITES if s.module == "torch.distributed.checkpoint" and s.attr == "save")
    assert dcp.where(({},), {"checkpoint_id": "ckpt"}, None) == "ckpt"
    assert savers.TORCH_SAVE.where(({}, "x.pt"), {}, None) == "x.pt"


def test_a_record_sizes_a_file_or_a_folder_and_never_names_a_stream(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"12345")
    (tmp_path / "d" / "b").write_bytes(b"123")
    assert _record(tmp_path / "d", 4, 0.5, "x") == {"path": str(tmp_path / "d"), "step": 4, "bytes": 8,
                                                          "seconds": 0.5, "source": "x"}
    assert _record(tmp_path / "d" / "a", 1, None, "x")["bytes"] == 5
    stream = _record(io.BytesIO(), 1, 0.1, "torch.save")
    assert stream["path"] is None and stream["bytes"] is None  # never an object's repr
    assert stream["note"] == savers.STREAM_NOTE and "note" not in _record(tmp_path / "d", 4, 0.5, "x")
    with open(tmp_path / "d" / "a", "rb") as f:
        assert _record(f, 1, 0.1, "torch.save")["path"] == str(tmp_path / "d" / "a")
    assert _record(tmp_path / "missing", 1, 0.1, "x")["bytes"] is None


def test_a_saver_without_a_path_of_its_own_is_the_files_its_nested_saves_wrote(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "params.pt").write_bytes(b"12345")
    (tmp_path / "d" / "optimizer.pt").write_bytes(b"123")
    two = _record(None, 2, 0.1, "skorch Checkpoint", (tmp_path / "d" / "params.pt", io.BytesIO(),
                                                             str(tmp_path / "d" / "optimizer.pt")), tmp_path)
    assert two["path"] == "d" and two["bytes"] == 8  # their folder, relative to the run folder; their sizes
    one = _record(None, 2, 0.1, "ignite Checkpoint", (str(tmp_path / "d" / "params.pt"),))
    assert one["path"] == str(tmp_path / "d" / "params.pt") and one["bytes"] == 5
    assert _record(None, 2, 0.1, "ignite Checkpoint") is None  # it decided not to save


def test_the_final_file_of_savers_that_add_a_suffix_or_write_through_a_temp_file():
    class Disk:
        dirname = "ckpts"

    assert _site("stable-baselines3 save").where((object(), "ppo"), {}, None) == "ppo.zip"
    assert _site("stable-baselines3 save").where((object(), "ppo.zip"), {}, None) == "ppo.zip"
    assert _site("ignite DiskSaver").where((Disk(), {}, "model_3.pt"), {}, None) == "ckpts/model_3.pt"
    assert _site("lightning Fabric.save").where((object(), "f.ckpt", {}), {}, None) == "f.ckpt"


def test_a_folder_of_too_many_files_has_no_size(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_files, "MAX_FILES", 2)
    for name in "abc":
        (tmp_path / name).write_bytes(b"1")
    assert savers.size_bytes(tmp_path) is None
