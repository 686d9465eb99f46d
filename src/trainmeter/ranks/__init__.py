"""The ranks wing: one run across processes and nodes (docs/spec.md section 19)."""
