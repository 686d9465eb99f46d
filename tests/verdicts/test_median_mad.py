"""The spike reference's median and MAD are statistics.median's, bit for bit, on any window (docs/spec.md section 14)."""

from __future__ import annotations

import random
import statistics

from trainmeter.verdicts.rules import median_mad


def _windows(rng: random.Random):
    for _ in range(4000):
        n = rng.randint(1, 120)
        kind = rng.random()
        if kind < 0.3:  # many ties
            yield [float(rng.randint(0, 4)) for _ in range(n)]
        elif kind < 0.5:  # extremes beside ordinary losses
            yield [rng.choice([1e300, -1e300, 1e-300, 0.0, -0.0, rng.gauss(2.0, 0.1)]) for _ in range(n)]
        else:
            yield [rng.lognormvariate(0.5, 1.0) for _ in range(n)]


def test_median_and_mad_match_statistics_bit_for_bit_on_random_windows():
    rng = random.Random(37)
    for window in _windows(rng):
        median = statistics.median(window)
        expected = (median, statistics.median([abs(x - median) for x in window]))
        assert median_mad(sorted(window)) == expected, window
