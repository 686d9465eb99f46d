"""trainmeter: a notebook-native monitor for PyTorch training.

``%load_ext trainmeter`` then ``%%trainmeter`` runs a cell under the monitor;
``tm.monitor(...)`` does the same in scripts (``tm.preload()`` ahead of it imports
what its start would). Importing this package does not import torch, pynvml or IPython.
"""

from __future__ import annotations

from typing import Any

from trainmeter._version import __version__
from trainmeter.api import alert, batch, calibrate, checkpoint, emit, monitor, phase, preload, save, step, stop
from trainmeter.core.controls import StopTraining
from trainmeter.record.runs import Run, load, runs, trainings

__all__ = [
    "Run",
    "StopTraining",
    "__version__",
    "alert",
    "batch",
    "calibrate",
    "checkpoint",
    "compare",
    "display",
    "doctor",
    "emit",
    "flops_per_token",
    "load",
    "load_ipython_extension",
    "monitor",
    "peak_flops",
    "phase",
    "preload",
    "runs",
    "save",
    "step",
    "stop",
    "trainings",
]

_LAZY = {
    "flops_per_token": ("trainmeter.compute.flops", "flops_per_token"),
    "peak_flops": ("trainmeter.compute.peaks", "peak_flops"),
    "doctor": ("trainmeter.checkup", "doctor"),
    "display": ("trainmeter.widget.show", "display"),
    "compare": ("trainmeter.comparison.figures", "compare"),
    "TrainmeterWidget": ("trainmeter.widget.widget", "TrainmeterWidget"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainmeter' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext trainmeter``: register ``%%trainmeter`` and ``%trainmeter``."""
    from trainmeter.magic import load_ipython_extension as _load

    _load(ipython)


def _arm_rank_autostart() -> None:
    """A child of a monitored run records itself as a rank once it trains (trainmeter.ranks.autostart)."""
    import os
    from contextlib import suppress

    if os.environ.get("TRAINMETER_RUN_DIR"):
        with suppress(Exception):  # importing trainmeter never fails because of monitoring
            from trainmeter.ranks.autostart import arm

            arm()


_arm_rank_autostart()
