"""The compute wing: FLOPs conventions, counted FLOPs, cited peaks, MFU, budget and ETA (docs/spec.md section 5)."""
