"""One sampled GPU's bookkeeping: samples, failures, the averaging window and the deadline grid."""

from __future__ import annotations

import pytest

from trainmeter.gpu.backend import GpuSample
from trainmeter.gpu.device_state import MAX_ERROR_CHARS, DeviceState, next_due


def _sample(t_s: float, util: float = 0.5) -> GpuSample:
    return GpuSample(index=0, t_s=t_s, util_gpu=util)


def test_a_sample_is_latest_in_the_history_and_counted_in_the_window_only_when_inside_it():
    st = DeviceState(0, history_len=2)
    st.take(_sample(1.0), 0.01, in_window=False)
    st.take(_sample(2.0), 0.02, in_window=True)
    st.take(_sample(3.0), 0.03, in_window=True)
    assert st.latest.t_s == 3.0 and [s.t_s for s in st.history] == [2.0, 3.0]
    assert (st.all.n, st.window.n, st.last_call_s) == (3, 2, 0.03)


def test_failures_in_a_row_stop_the_device_and_a_sample_resets_the_run_of_them():
    st = DeviceState(0, history_len=4)
    st.fail("slow", fatal=False, max_errors=3, call_s=None)
    st.fail("slow", fatal=False, max_errors=3, call_s=0.5)
    st.take(_sample(1.0), 0.01, in_window=False)
    st.fail("slow", fatal=False, max_errors=3, call_s=None)
    assert st.active and st.n_errors == 3 and st.last_call_s == 0.01
    st.fail("slow", fatal=False, max_errors=3, call_s=None)
    st.fail("x" * 1000, fatal=False, max_errors=3, call_s=None)
    assert not st.active and st.stopped_reason.startswith("3 failures in a row; last: xxx")
    assert len(st.last_error) == MAX_ERROR_CHARS


def test_a_fatal_failure_stops_the_device_at_once_with_its_text():
    st = DeviceState(0, history_len=4)
    st.fail("GPU is lost", fatal=True, max_errors=10, call_s=None)
    status = st.status()
    assert (status.active, status.stopped_reason, status.n_errors, status.n_samples) == (False, "GPU is lost", 1, 0)


def test_closing_the_window_in_the_past_takes_back_the_samples_counted_after_it():
    st = DeviceState(0, history_len=10)
    for t, util in ((1.0, 0.2), (2.0, 0.4), (3.0, 1.0)):
        st.take(_sample(t, util), 0.0, in_window=True)
    st.close_window(1.0, None, 2.5)
    result = st.window.result(0)
    assert result.n_samples == 2 and result.means["util_gpu"] == pytest.approx(0.3) and result.end_s == 2.0


def test_the_next_deadline_stays_on_the_grid_and_skips_missed_ticks():
    assert next_due(None, 3.0, 0.5) == pytest.approx(3.5)
    assert next_due(0.5, 0.4, 0.5) == pytest.approx(1.0)
    assert next_due(0.5, 1.2, 0.5) == pytest.approx(1.5)
    assert next_due(1.5, 1.7, 0.5) == pytest.approx(2.0)
    assert next_due(1.0, 1.2, 0.5) == pytest.approx(1.5)  # the grid point still ahead (a slow sample's skip)
