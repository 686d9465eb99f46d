"""Which extensions a run gets, from its options."""

from __future__ import annotations

from typing import Any

from trainmeter.options import MonitorOptions


def default_extensions(options: MonitorOptions) -> list[Any]:
    """Return the sources and sinks a run gets besides the core (never raises)."""
    out: list[Any] = []
    from trainmeter.compute_ext import ComputeExtension

    out.append(ComputeExtension())
    from trainmeter.gpu_ext import GpuExtension

    out.append(GpuExtension())
    from trainmeter.node import NodeSampler
    from trainmeter.taps import Taps
    from trainmeter.timesplit import TimeSplit

    out += [TimeSplit(), NodeSampler(), Taps(enabled=options.tap)]
    return out
