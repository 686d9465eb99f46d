"""Framework adapters: Hugging Face, Lightning, Keras 3, fastai and accelerate as sources and controls."""
