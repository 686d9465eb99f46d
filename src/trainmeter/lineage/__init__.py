"""The lineage wing: a resumed run, its counts over the training and the work restarts cost (docs/spec.md §22)."""
