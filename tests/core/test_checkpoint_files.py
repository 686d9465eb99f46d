"""Checkpoint files: each named for its step, never over another; a failed save leaves no debris and names a disk
error as one (docs/spec.md section 21)."""

from __future__ import annotations

import errno
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from trainmeter.core.extension import ExtensionBase  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def _loop(steps: int, at: dict[int, object], seed: int = 0):
    """A hand loop of ``steps`` steps calling ``at[i]()`` after step ``i + 1``'s work."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i in at:
            at[i]()
    return model


def test_two_checkpoints_are_two_files_each_named_for_its_step_and_holding_it(run_root):
    with tm.monitor(run_dir=run_root, name="two") as m:
        _loop(12, {2: tm.checkpoint, 7: tm.checkpoint})  # honoured after steps 4 and 9
    p = _passport(m)
    assert [(c["path"], c["step"]) for c in p["checkpoints"]] == [("checkpoints/step-4.pt", 4),
                                                                  ("checkpoints/step-9.pt", 9)]
    four, nine = (torch.load(m.run_dir / c["path"]) for c in p["checkpoints"])
    assert (four["step"], nine["step"]) == (4, 9)
    assert not torch.equal(four["model"]["0.weight"], nine["model"]["0.weight"])
    assert sorted(os.listdir(m.run_dir / "checkpoints")) == ["step-4.pt", "step-9.pt"]


def _full_disk_save(obj, f, *args, **kwargs):
    f.write(b"x" * 4096)  # a partial write, then the disk is full
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.monitor_warns("refused")
def test_a_save_that_hits_a_full_disk_leaves_no_temporary_file_and_says_no_space_left_on_device(run_root,
                                                                                                monkeypatch):
    monkeypatch.setattr(torch, "save", _full_disk_save)
    with tm.monitor(run_dir=run_root, name="full") as m:
        model = _loop(6, {2: tm.checkpoint})
    p = _passport(m)
    [refused] = p["checkpoints_refused"]
    assert p["checkpoints"] == [] and refused["step"] == 4
    assert "disk error: no space left on device (ENOSPC)" in refused["reason"]
    assert os.listdir(m.run_dir / "checkpoints") == []  # no step-4.pt.tmp
    assert p["status"] == "completed" and torch.isfinite(model[0].weight).all()


class _PathSaver:
    """A framework saver that writes a folder by path and fails the way torch's zip writer does on a full disk."""

    name = "pathsaver"

    def request_stop(self) -> bool:
        return True

    def save_checkpoint(self, dir_path: str, name: str) -> str | None:
        folder = os.path.join(dir_path, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "model.bin"), "wb") as f:
            f.write(b"x" * 4096)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1152 vs 1046")


class _Frameworks(ExtensionBase):
    name = "frameworks"

    def __init__(self, control):
        self._control = control

    def start(self, monitor):
        monitor.controls.use_framework(self._control)


@pytest.mark.monitor_warns("refused")
def test_a_framework_save_that_fails_on_a_full_disk_is_removed_and_named_a_full_disk(run_root, monkeypatch):
    real = os.statvfs

    class _Full:  # what the disk says once the save failed: nothing free
        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return 0 if name in ("f_bavail", "f_bfree") else getattr(self._st, name)

    monkeypatch.setattr(os, "statvfs", lambda path: _Full(real(path)))
    m = make_monitor(make_options(run_dir=run_root, widget=False), extensions=[_Frameworks(_PathSaver())], text=False)
    with tm.api.run_monitored(m):
        _loop(3, {0: tm.checkpoint})
    monkeypatch.setattr(os, "statvfs", real)
    [refused] = _passport(m)["checkpoints_refused"]
    assert refused["reason"].startswith("disk error: no space left on device (0 bytes free")
    assert "unexpected pos 1152 vs 1046" in refused["reason"]  # the saver's own words, after ours
    assert os.listdir(m.run_dir / "checkpoints") == []


@pytest.mark.monitor_warns("refused")
def test_a_failed_save_that_is_no_disk_error_is_still_removed_and_keeps_its_own_reason(run_root, monkeypatch):
    def broken(obj, f, *args, **kwargs):
        f.write(b"x" * 10)
        raise ValueError("cannot pickle this")

    monkeypatch.setattr(torch, "save", broken)
    with tm.monitor(run_dir=run_root, name="broken") as m:
        _loop(3, {0: tm.checkpoint})
    [refused] = _passport(m)["checkpoints_refused"]
    assert "cannot pickle this" in refused["reason"] and "disk" not in refused["reason"]
    assert os.listdir(m.run_dir / "checkpoints") == []


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only; skipped elsewhere), unmounted after the test."""
    import subprocess

    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.monitor_warns("refused")
def test_a_checkpoint_bigger_than_a_real_full_disk_leaves_it_free_and_the_passport_written(small_disk):
    torch.manual_seed(0)
    model = nn.Linear(512, 512)  # 1 MiB of weights and 2 MiB of Adam state: more than the disk holds
    opt = torch.optim.Adam(model.parameters())
    with tm.monitor(run_dir=small_disk, name="full") as m:
        for i in range(6):
            loss = F.mse_loss(model(torch.randn(4, 512)), torch.randn(4, 512))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 2:
                tm.checkpoint()
    p = _passport(m)
    assert p["checkpoints_refused"][0]["reason"].startswith("disk error: no space left on device (ENOSPC)")
    assert os.listdir(m.run_dir / "checkpoints") == [] and p["status"] == "completed"
