"""GPU counters: the backend seam (NVML, amdsmi), device selection, background sampler, utilization ladder.

Nothing here imports ``pynvml`` or ``torch`` at module level (:mod:`trainmeter.gpu.nvml` imports ``pynvml`` lazily).
"""

from __future__ import annotations
