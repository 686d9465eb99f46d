"""The lineage wing: a run that resumes a saved one, its counts over the training and the work restarts cost
(docs/spec.md section 22)."""
