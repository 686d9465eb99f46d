"""The overhead wing: the monitor's own cost, measured while it runs (docs/spec.md section 17)."""
