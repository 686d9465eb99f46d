"""Emitted values: each checked on its own; from other threads queued and folded by trainmeter's own thread."""

from __future__ import annotations

import threading
import time

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def _started(tmp_path, clock=None, **options):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, **options),
                        clock=clock or FakeClock(), text=False, probes=False, extensions=[]).start()


def test_good_values_are_recorded_and_each_bad_one_is_left_out_with_a_warning(tmp_path):
    m = _started(tmp_path)
    with pytest.warns(MonitorWarning):
        m.record({"lr": 0.1, "tokens_per_step": 3.0, "gpu0.util": 1.0, "name": "text", "big": 10**400})
    assert sorted(m.series) == ["lr"]
    assert len(m.warnings) == 4
    m.finish("completed")


def test_values_from_another_thread_are_recorded_by_the_folding_thread_stamped_then(tmp_path):
    clock = FakeClock(50.0)
    m = _started(tmp_path, clock)
    clock.advance(1.0)
    emitter = threading.Thread(target=lambda: m.record({"x": 2.0}))
    emitter.start()
    emitter.join()
    m.on_step(4)  # the training thread folds nothing
    deadline = time.monotonic() + 10.0
    while "x" not in m.series or not m.series["x"].pending:
        assert time.monotonic() < deadline, "the folding thread never recorded the value"
        time.sleep(0.01)
    _, steps, times, values = m.series["x"].read(0)
    assert (steps, values) == ([0], [2.0]) and times == [pytest.approx(1.0)]  # stamped when folded
    m.finish("completed")


def test_new_names_past_max_series_are_counted_once_each(tmp_path):
    m = _started(tmp_path, max_series=2)
    with pytest.warns(MonitorWarning, match="max_series"):
        for _ in range(3):
            m.record({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    assert sorted(m.series) == ["a", "b"]
    assert m.series_dropped == 2 and m.series_dropped_names == ["c", "d"]
    m.finish("completed")


def test_a_sampler_point_goes_to_its_own_time_series(tmp_path):
    m = _started(tmp_path)
    m.record_at("node.cpu", 1.5, 40)
    with pytest.warns(MonitorWarning, match="a background sampler owns that series"):
        m.record({"node.cpu": 1.0})
    assert m.series["node.cpu"].x_kind == "time" and m.series["node.cpu"].read(0)[3] == [40.0]
    m.finish("completed")


def test_many_new_names_in_one_emit_grow_the_registry_with_one_copy(tmp_path, monkeypatch):
    import trainmeter.core.series_registry as emits

    m = _started(tmp_path, max_series=5000)
    sizes_seen: list[int] = []
    real = emits.Series

    def counting(*args, **kwargs):
        sizes_seen.append(len(m.series))  # the published registry's size when each new series is made
        return real(*args, **kwargs)

    monkeypatch.setattr(emits, "Series", counting)
    m.record({f"s{i}": float(i) for i in range(3000)})
    assert len(sizes_seen) == 3000 and set(sizes_seen) == {sizes_seen[0]}  # one copy, not one per name
    assert len(m.series) >= 3000 and m.series["s2999"].stats().count == 1
    m.finish("completed")
