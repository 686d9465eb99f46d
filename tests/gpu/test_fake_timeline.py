"""The fake backend's timelines: levels at a time and their integrals."""

from __future__ import annotations

import pytest

from tests.fakes.gpu.fake_profiles import GEMM, IDLE, Phase
from tests.fakes.gpu.fake_timeline import integrals_at, levels_at

TIMELINE = (Phase(duration_s=2.0, levels=IDLE), Phase(duration_s=3.0, levels=GEMM))


def test_levels_at_walks_the_phases_and_the_last_one_holds_forever():
    assert levels_at(TIMELINE, 1.9) is IDLE
    assert levels_at(TIMELINE, 2.0) is GEMM
    assert levels_at(TIMELINE, 1e6) is GEMM


def test_integrals_are_level_times_seconds_with_the_last_phase_extended():
    sums = integrals_at(TIMELINE, 10.0, ("power_w", "tensor_activity"))
    assert sums["power_w"] == pytest.approx(IDLE.power_w * 2.0 + GEMM.power_w * 8.0)
    assert sums["tensor_activity"] == pytest.approx(GEMM.tensor_activity * 8.0)
    assert integrals_at(TIMELINE, -1.0, ("power_w",)) == {"power_w": 0.0}
