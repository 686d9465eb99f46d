"""GPU counters (NVML, amdsmi), device selection, background sampler, utilization ladder; no heavy import here."""
