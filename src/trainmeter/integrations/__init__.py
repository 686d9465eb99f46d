"""The integration wing: each framework and logger through its own API (docs/spec.md section 11)."""
