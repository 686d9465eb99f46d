"""One decimated view per series of the live run: the widget's frames and curves.json read the same decimator, which
sees every point once whichever thread catches it up (issue 37)."""

from __future__ import annotations

import io
import json
import threading

from tests.fakes.widget import SilentWidget
from tests.widget.wire_types import decode_frame
from trainmeter.comparison.extension import CurvesRecorder
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget.publisher import Publisher


def _monitor(run_root, clock, **kw):
    options = make_options(run_dir=run_root, name="views", interval_s=1.0)
    return make_monitor(options, clock=clock, text=False, probes=False, out=io.StringIO(), **kw).start()


def test_the_widget_and_curves_json_share_one_decimator_per_loss_series(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock, extensions=[CurvesRecorder()])
    pub = Publisher(m.context, SilentWidget(), clock=clock, budget_points=100)
    for step in range(1, 5001):
        clock.advance(0.01)
        m.on_step(64, loss_value=1.0 + (step * 7919 % 1000) / 1000.0)
        if step % 25 == 0:
            pub.tick()
    m.finish("completed")
    pub.close()
    loss = pub.feed.decimators["train_loss"]
    assert m.context.series_views.decimators["train_loss"] is loss and loss.budget_points == 100  # the smallest budget asked
    doc = json.loads((m.run_dir / "curves.json").read_text())["series"]["train_loss"]
    xs, ys = loss.columns(include_open=True)
    assert doc["count"] == loss.count == 5000 and doc["step"] == [int(x) for x in xs] and doc["value"] == ys
    drawn = next(s for s in decode_frame(pub.widget.history).series if s.name == "train_loss")
    assert list(drawn.xs) == xs and list(drawn.ys) == ys  # the final history is the same buckets


def test_catching_up_from_two_threads_decimates_each_point_once(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock)
    views = m.context.series_views
    views.subscribe("test", ["x"])
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            views.catch_up()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for step in range(1, 20_001):
        m.record({"x": float(step % 13)}, step=step)
    stop.set()
    for t in threads:
        t.join()
    views.catch_up()
    d = views.decimators["x"]
    xs, _ = d.columns()
    assert d.count == 20_000 and xs == sorted(xs) and len(xs) <= d.budget_points
    m.finish("completed")


def test_the_views_cursor_holds_back_only_the_series_subscribed(run_root):
    clock = FakeClock(0.0)
    m = _monitor(run_root, clock)
    m.context.series_views.subscribe("test", ["kept"])
    for step in range(1, 101):
        m.record({"kept": 1.0, "other": 2.0}, step=step)
    m.report_now()  # the run log reads both
    assert m.series["other"].pending == 0 and m.series["kept"].pending == 100  # the view has not read it yet
    m.context.series_views.catch_up({"kept": 40})  # a report's ends: the rest waits for the next read
    m.registry.trim()
    assert m.series["kept"].pending == 60 and m.context.series_views.decimators["kept"].count == 40
    m.finish("completed")
