"""The run's token-weighted sequence length: sum of tokens x S over the batches, kept in runs of equal S."""

from __future__ import annotations


class TokenWeightedSeq:
    """Sum over the run of each batch's tokens times its sequence length S (dim 1 of 2-D token ids); :meth:`at` is
    called on the probes' slow path only (docs/spec.md sections 5, "S", and 20). Training thread only."""

    __slots__ = ("weighted", "with_seq", "mark", "seq")

    def __init__(self) -> None:
        self.weighted = 0  # sum of tokens x S over closed runs
        self.with_seq = 0  # tokens of closed runs that had an S
        self.mark = 0  # the run's tokens when the open run began
        self.seq = 0  # S of the open run (0: its batches had no S: 1-D token ids, samples)

    def at(self, tokens: int, seq: int) -> None:
        """A batch of sequence length ``seq`` (0: none) is about to be counted, ``tokens`` counted before it."""
        if seq == self.seq:
            return
        if self.seq:
            self.weighted += (tokens - self.mark) * self.seq
            self.with_seq += tokens - self.mark
        self.mark, self.seq = tokens, seq

    def mean(self, tokens: int) -> tuple[float, int] | None:
        """``(token-weighted S, tokens it is over)`` with ``tokens`` counted so far, or ``None`` (no S seen)."""
        weighted, with_seq = self.weighted, self.with_seq
        if self.seq and tokens > self.mark:  # (tokens still pending at the read are left out)
            weighted += (tokens - self.mark) * self.seq
            with_seq += tokens - self.mark
        return (weighted / with_seq, with_seq) if with_seq > 0 else None
