"""The time-split wing: data-loader waits, eval and checkpoint spans carved from training (docs/spec.md section 9)."""
