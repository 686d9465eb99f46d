"""The optimizer wing: learning rate, gradient norm and the smoothed loss of the step record (docs/spec.md section 7)."""
