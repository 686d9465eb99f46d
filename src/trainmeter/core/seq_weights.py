"""The run's token-weighted sequence length: sum of tokens x S over the batches, kept in runs of equal S."""

from __future__ import annotations


class TokenWeightedSeq:
    """Sum over the run of each batch's tokens times its sequence length S (dim 1 of 2-D token ids).

    The root's batches are counted on two paths (docs/spec.md section 20): a batch shaped like the last
    counted one adds its tokens on the call wrapper's fast path, anything else takes the slow path. S can
    only change on the slow path, which calls :meth:`at` with the run's tokens so far; the tokens counted
    between two changes all had the S of the first. So the sum is exact at the cost of one integer compare
    per slow-path batch, and nothing on the fast path (docs/spec.md section 5, "S").

    Thread safety: training thread only (the probes' calls), read at reports on the same thread.
    """

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
