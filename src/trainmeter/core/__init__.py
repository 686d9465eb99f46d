"""The core: the run state, the hot path, the extension contract and its dispatcher; imports no wing."""
