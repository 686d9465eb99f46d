"""Loss ordering: a step's loss reaches its series after the next step, never ahead of a loss still being read."""

from __future__ import annotations

from trainmeter.core.clock import FakeClock
from trainmeter.core.scalars import StepLoss
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events


def _started(tmp_path):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), clock=FakeClock(),
                        text=False, probes=False, extensions=[]).start()


def _points(m, name):
    """``(step, value)`` of series ``name``: in memory while the run goes on, from the run log once it ended."""
    if m.status == "running":
        _, steps, _, values = m.series[name].read(0) if name in m.series else (0, [], [], [])
        return list(zip(steps, values, strict=True))
    events = read_events(m.run_dir / "events.jsonl")
    return [(s, v) for e in events if e["kind"] == "series" and e["name"] == name
            for s, v in zip(e["step"], e["value"], strict=True)]


def test_a_loss_read_on_the_host_is_held_until_the_next_step(tmp_path):
    m = _started(tmp_path)
    m.on_step(8, loss_value=3.0)
    assert _points(m, "train_loss") == [] and m.steps_state.held_step == 1
    m.on_step(8, loss_value=2.0)
    assert _points(m, "train_loss") == [(1, 3.0)] and m.steps_state.held_step == 2
    m.finish("completed")
    assert _points(m, "train_loss") == [(1, 3.0), (2, 2.0)]


class _DeferredReader:
    """A reader whose reads complete later (a CUDA copy in flight)."""

    pending = 0

    def read(self, value, key):
        self.pending += 1
        return None


def test_a_loss_still_being_read_keeps_later_ones_behind_it(tmp_path):
    m = _started(tmp_path)
    slow = StepLoss("train_loss")
    slow.add(_DeferredReader(), object())
    m.on_step(8, slow)
    m.on_step(8, loss_value=2.0)  # queued behind the pending one, not held
    m.on_step(8, loss_value=1.0)
    assert _points(m, "train_loss") == [] and len(m.steps_state.losses) == 3
    slow.resolve(0, 0, 4.0)
    m.on_step(8)
    assert _points(m, "train_loss") == [(1, 4.0), (2, 2.0), (3, 1.0)]
    m.finish("completed")


def test_the_cells_own_train_loss_is_the_headline_and_the_captured_one_is_left_out(tmp_path):
    m = _started(tmp_path)
    m.record({"train_loss": 9.0})
    m.on_step(8, loss_value=3.0)
    m.on_step(8, loss_value=2.0)
    m.finish("completed")
    assert _points(m, "train_loss") == [(0, 9.0)]
    assert m.series_info["train_loss"]["source"] == "tm.emit(train_loss=...)"


def test_a_train_loss_emitted_after_captured_points_gets_its_own_series(tmp_path):
    m = _started(tmp_path)
    m.on_step(8, loss_value=3.0)
    m.on_step(8, loss_value=2.0)
    m.record({"train_loss": 9.0})
    m.finish("completed")
    assert _points(m, "train_loss") == [(1, 3.0), (2, 2.0)]
    assert _points(m, "train_loss.emitted") == [(2, 9.0)]
