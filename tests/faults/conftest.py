"""Shared checks of the fault tests: nothing of a run is left behind."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest


def torch_patch_points() -> dict[str, object]:
    """The torch attributes a run patches, as they are now."""
    import torch
    from torch.utils.data import dataloader

    return {
        "torch.save": torch.save,
        "torch.serialization.save": torch.serialization.save,
        "DataLoader.__next__": vars(dataloader._BaseDataLoaderIter)["__next__"],
        "Module.train": vars(torch.nn.Module)["train"],
        "Tensor.backward": vars(torch.Tensor)["backward"],
    }


def assert_left_nothing(before_patches: dict[str, object]) -> None:
    """The slot is free, patches are restored, no handler of ours holds SIGINT and no trainmeter thread runs."""
    from trainmeter.core.monitor import active

    assert active() is None
    assert torch_patch_points() == before_patches
    handler = signal.getsignal(signal.SIGINT)  # a HeldInterrupts left installed swallows every later Ctrl-C
    assert not (getattr(handler, "__module__", None) or "").startswith("trainmeter"), handler
    alive = [t.name for t in threading.enumerate()
             if t.name.startswith("trainmeter") and t.is_alive() and t not in _BEFORE]
    assert alive == []


def assert_passport_valid(run_dir: Path | None) -> dict | None:
    """Where a run folder exists, it holds a complete, parseable passport."""
    if run_dir is None:
        return None
    passport = json.loads((run_dir / "passport.json").read_text(encoding="utf-8"))
    assert passport["status"] in {"completed", "interrupted", "failed", "terminated"}
    assert (run_dir / "passport.md").read_text(encoding="utf-8").startswith("## Training run")
    return passport


_BEFORE: set[threading.Thread] = set()


@pytest.fixture
def patch_points():
    """torch's patch points before the test; also notes threads left by earlier tests (not this one's)."""
    pytest.importorskip("torch")
    _BEFORE.clear()
    _BEFORE.update(threading.enumerate())
    return torch_patch_points()
