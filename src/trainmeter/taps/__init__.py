"""The taps wing: W&B, TensorBoard, MLflow, HF Trainer and Lightning logging read as series (docs/spec.md section 11)."""
