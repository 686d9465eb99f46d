"""The verdicts wing: one sentence per trouble with the step it began, and its chart marker (docs/spec.md section 14)."""
