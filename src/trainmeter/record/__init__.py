"""The record wing: the run folder, events.jsonl, the text line and the passport (docs/spec.md section 6)."""
