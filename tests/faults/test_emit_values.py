"""Item 8: each emitted value is checked on its own; bad ones are left out with one warning each."""

from __future__ import annotations

import warnings

import pytest

import trainmeter.api as tm
from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


class BadFloat:
    def __float__(self) -> float:
        raise RuntimeError("no float here")


@pytest.fixture
def m(run_root):
    monitor = make_monitor(make_options(run_dir=run_root, name="values"), clock=FakeClock(), text=False,
                           probes=False, extensions=[]).start()
    yield monitor
    monitor.finish("completed")


def _warned(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, MonitorWarning)]


def test_good_values_around_bad_ones_are_recorded_with_one_warning_per_bad_value(m):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tm.emit(before=1.0, big=10**400, bad=BadFloat(), text="x", after=2.0)
        tm.emit(before=1.5, big=10**400, bad=BadFloat(), text="x", after=2.5)
    assert sorted(m.series) == ["after", "before"]
    assert m.series["after"].stats().count == 2
    said = _warned(caught)
    assert len(said) == 3 and all(any(n in w for w in said) for n in ("big", "bad", "text"))


def test_a_meta_tensor_is_left_out_with_a_warning(m):
    torch = pytest.importorskip("torch")
    with pytest.warns(MonitorWarning, match="meta"):
        tm.emit(meta=torch.zeros((), device="meta"), ok=torch.tensor(3.0))
    assert sorted(m.series) == ["ok"] and m.series["ok"].stats().last == 3.0


def test_an_invalid_train_loss_does_not_turn_off_loss_capture(m):
    with pytest.warns(MonitorWarning):
        tm.emit(train_loss="x")
    m.on_step(10, loss_value=2.0)
    m.on_step(10)  # a step's captured loss reaches its series when the next step begins
    assert m.series["train_loss"].stats().last == 2.0


@pytest.mark.parametrize("name", ["tokens_per_step", "node.cpu", "gpu0.util", "__loss__"])
def test_reserved_internal_names_are_rejected_with_a_warning(m, name):
    with pytest.warns(MonitorWarning, match="reserved"):
        tm.emit(**{name: 1.0})
    m.on_step(300)
    assert name not in m.series or m.series[name].x_kind == "time"
    assert m.step_series.read(0)[3] == [300]
