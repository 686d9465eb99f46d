"""SeriesReader: a wing reads the new points of its series and never holds back the others."""

from __future__ import annotations

from trainmeter.core.clock import FakeClock
from trainmeter.core.series_views import SeriesReader
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def test_a_reader_gets_each_new_point_of_its_series_once_and_lets_the_others_be_trimmed(run_root):
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=3600), clock=clock, text=False, probes=False).start()
    reader = SeriesReader(m, ["train_loss"])
    for i in range(3):
        clock.advance(1.0)
        m.on_step(8, loss_value=float(i))
        m.record({"other": float(i)})
    clock.advance(1.0)
    m.on_step(8)  # the last held loss reaches its series
    assert reader.new_points() == [("train_loss", [1, 2, 3], [0.0, 1.0, 2.0])]
    assert reader.new_points() == []  # nothing new
    m.report_now()  # the run log reads both
    assert m.series["other"].pending == 0 and m.series["train_loss"].pending == 0  # trimming is not held back
    m.finish("completed")


def test_a_report_read_later_takes_the_points_up_to_its_ends_and_leaves_the_rest_for_the_next(run_root):
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=3600), clock=clock, text=False, probes=False).start()
    reader = SeriesReader(m, ["train_loss"])
    for i in range(2):
        m.record({"train_loss": float(i), "other": float(i)}, step=i + 1)
    ends = {"train_loss": m.series["train_loss"].end, "other": m.series["other"].end}
    m.record({"train_loss": 9.0, "other": 9.0}, step=3)  # after the report
    assert reader.new_points(ends) == [("train_loss", [1, 2], [0.0, 1.0])]
    m.report_now()  # the run log reads both
    assert m.series["other"].pending == 0 and m.series["train_loss"].pending == 1  # only what the reader holds
    assert reader.new_points() == [("train_loss", [3], [9.0])]
    m.finish("completed")
