"""Item 6: ``tm.emit`` from several threads never corrupts the record nor puts a time backwards."""

from __future__ import annotations

import json
import threading

import pytest

import trainmeter.api as tm
from trainmeter.core import emits as emits_module
from trainmeter.core import monitor as monitor_module
from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events


def test_eight_threads_emitting_while_training_record_every_value_once_in_time_order(run_root, monkeypatch):
    from trainmeter.core.series import Series

    writers: set[str] = set()
    real_append = Series.append

    def append(self, step, t_s, value):
        writers.add(threading.current_thread().name)
        real_append(self, step, t_s, value)

    monkeypatch.setattr(Series, "append", append)
    clock = FakeClock(100.0)
    m = make_monitor(make_options(run_dir=run_root, interval_s=1.0, name="threads"), clock=clock, text=False,
                     probes=False, extensions=[]).start()
    per_thread, threads_n = 500, 8
    go = threading.Event()

    def emitter(k: int) -> None:
        go.wait()
        for i in range(per_thread):
            tm.emit(**{f"t{k}": float(i)})

    threads = [threading.Thread(target=emitter, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    go.set()
    step = 0
    while any(t.is_alive() for t in threads) or step < 20:
        clock.advance(0.25)
        m.on_step(1)
        tm.emit(lr=float(step))
        step += 1
    for t in threads:
        t.join()
    m.finish("completed")
    events = read_events(m.run_dir / "events.jsonl")
    for k in range(threads_n):
        rows = [e for e in events if e["kind"] == "series" and e["name"] == f"t{k}"]
        values = [v for e in rows for v in e["value"]]
        times = [t for e in rows for t in e["t_us"]]
        assert values == [float(i) for i in range(per_thread)]  # each once, in emit order
        assert times == sorted(times)
    assert writers == {threading.main_thread().name}  # one writer: the recording thread
    lr_times = [t for e in events if e["kind"] == "series" and e["name"] == "lr" for t in e["t_us"]]
    assert lr_times == sorted(lr_times)
    assert json.loads((m.run_dir / "passport.json").read_text())["emits_dropped"] == 0


def test_a_flood_from_other_threads_is_bounded_counted_and_warned(run_root, monkeypatch):
    monkeypatch.setattr(emits_module, "MAX_QUEUED", 10)
    m = make_monitor(make_options(run_dir=run_root, name="flood"), clock=FakeClock(), text=False, probes=False,
                     extensions=[]).start()
    t = threading.Thread(target=lambda: [tm.emit(x=float(i)) for i in range(25)])
    with pytest.warns(monitor_module.MonitorWarning, match="later ones are counted and dropped"):
        t.start()
        t.join()
    m.on_step(1)
    m.finish("completed")
    assert m.series["x"].stats().count == 10 and m.queue_dropped == 15
    assert json.loads((m.run_dir / "passport.json").read_text())["emits_dropped"] == 15
