"""The run's token-weighted S, kept in runs of equal S from the slow path's batches."""

from __future__ import annotations

from trainmeter.core.root_calls import TokenWeightedSeq


def test_runs_of_equal_length_weight_each_token_by_its_batch_length() -> None:
    acc = TokenWeightedSeq()
    tokens = 0
    for seq, batches in ((16, 3), (48, 1), (16, 2)):
        acc.at(tokens, seq)  # the slow path sees the first batch of each run
        tokens += batches * 4 * seq  # the fast path counts the others like it
    s, over = acc.mean(tokens)
    assert over == tokens == 4 * (16 * 5 + 48)
    assert s == (4 * 16 * 5 * 16 + 4 * 48 * 48) / tokens


def test_batches_without_a_length_are_left_out_and_no_length_gives_none() -> None:
    acc = TokenWeightedSeq()
    assert acc.mean(0) is None
    acc.at(0, 0)
    acc.at(100, 10)  # 100 tokens of 1-D ids before
    assert acc.mean(140) == (10.0, 40)
