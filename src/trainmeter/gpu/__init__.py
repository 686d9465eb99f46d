"""GPU counters: NVML backend seam, device selection, background sampler, utilization ladder.

Nothing here imports ``pynvml`` or ``torch`` at module level; only
:mod:`trainmeter.gpu.nvml` imports ``pynvml``, lazily, inside :func:`~trainmeter.gpu.nvml.open_nvml`.
"""

from __future__ import annotations
