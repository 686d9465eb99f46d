"""Straggler scores (relative and individual) and the verdict sentence."""

from __future__ import annotations

import pytest

from trainmeter.ranks.stragglers import score_ranks


def timing(outside: float | None, step: float = 1.0, best: float | None = None, latest: float | None = None) -> dict:
    return {"step_s": step, "outside_backward_s": outside, "best_window_outside_backward_s": best,
            "window": {"outside_backward_s": latest}}


def test_a_rank_twice_as_slow_is_named_against_the_fastest_of_two():
    report = score_ranks({0: timing(0.10), 1: timing(0.20)})
    assert report.straggler == 1
    assert report.verdict.startswith("rank 1 is 2.0x slower than the fastest rank in work outside backward")
    assert [s.rank for s in report.scores] == [1, 0]
    assert report.scores[0].vs_fastest == pytest.approx(2.0)


def test_with_many_ranks_the_verdict_is_against_the_median():
    report = score_ranks({0: timing(0.1), 1: timing(0.1), 2: timing(0.19), 3: timing(0.1)})
    assert report.straggler == 2
    assert "rank 2 is 1.9x slower than the median" in report.verdict


def test_no_rank_is_named_when_all_are_close():
    report = score_ranks({0: timing(0.10), 1: timing(0.11), 2: timing(0.105)})
    assert report.straggler is None and report.verdict.startswith("no straggler")


def test_a_straggler_with_the_most_data_waiting_is_told_to_check_its_loader():
    report = score_ranks({0: timing(0.1), 1: timing(0.3)}, data_wait_share={0: 0.01, 1: 0.5})
    assert "in data waits: check its loader workers" in report.verdict


def test_step_time_is_used_when_backward_was_not_timed():
    report = score_ranks({0: timing(None, step=0.1), 1: timing(None, step=0.25)})
    assert report.figure == "step_s" and report.straggler == 1


def test_the_individual_score_compares_the_latest_window_with_the_rank_own_best():
    report = score_ranks({0: timing(0.1, best=0.1, latest=0.1), 1: timing(0.1, best=0.1, latest=0.3)})
    by_rank = {s.rank: s for s in report.scores}
    assert by_rank[1].vs_own_best == pytest.approx(3.0) and by_rank[0].vs_own_best == pytest.approx(1.0)


def test_one_rank_cannot_be_scored():
    assert score_ranks({0: timing(0.1)}) is None


def test_repeated_offenders_are_counted_window_by_window():
    from trainmeter.ranks.stragglers import with_repeats

    def w(x):
        return {"steps": 5, "step_s": 1.0, "outside_backward_s": x}

    windows = {0: [w(0.1), w(0.1), w(0.3), {"steps": 0}], 1: [w(0.3), w(0.3), w(0.1)]}
    report = with_repeats(score_ranks({0: timing(0.1), 1: timing(0.2)}), windows)
    assert (report.named_windows, report.windows) == ({1: 2, 0: 1}, 3)
    assert report.verdict.endswith("(named in 2 of 3 report windows)")
    assert report.to_dict()["named_windows"] == {"1": 2, "0": 1}
