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

    writers: dict[str, set[str]] = {}
    real_append = Series.append

    def append(self, step, t_s, value):
        writers.setdefault(self.name, set()).add(threading.current_thread().name)
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
    # one writer per series at a time: the other threads' values by the folding thread (the final fold on the
    # finishing thread once it has stopped), lr by the recording thread
    assert writers["lr"] == {threading.main_thread().name}
    assert all(w <= {"trainmeter-emits", threading.main_thread().name} for w in writers.values())
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


STEP_RATE_BOUND = 0.4  # training's steps with a side thread emitting flat out / with one spinning as hard
WINDOW_S = 0.2
WINDOWS = 6  # alternating windows of each, summed: the machine's load shifts both alike


def _steps_in_window(run_root, side) -> tuple[int, object]:
    """Steps the training thread counts in ``WINDOW_S`` of real time while ``side(stop)`` runs in another thread."""
    import time

    m = make_monitor(make_options(run_dir=run_root, interval_s=3600, name="rate"), text=False, probes=False,
                     extensions=[]).start()
    stop = threading.Event()
    t = threading.Thread(target=side, args=(stop,))
    t.start()
    try:
        end = time.perf_counter() + WINDOW_S
        steps = 0
        while time.perf_counter() < end:
            m.on_step(1)
            steps += 1
    finally:
        stop.set()
        t.join()
        m.finish("completed")
    return steps, m


@pytest.mark.monitor_warns("values waiting to be recorded")  # the emit queue may fill
def test_a_side_thread_emitting_flat_out_leaves_training_its_step_rate(run_root):
    def spin(stop):  # the same Python work without an emit: the GIL shared the same way
        i = 0
        while not stop.is_set():
            {"x": float(i)}  # noqa: B018
            i += 1

    def emit(stop):
        i = 0
        while not stop.is_set():
            tm.emit(x=float(i))
            i += 1

    spinning = emitting = 0
    for _ in range(WINDOWS):
        spinning += _steps_in_window(run_root, spin)[0]
        steps, m = _steps_in_window(run_root, emit)
        emitting += steps
    print(f"steps with a side thread emitting: {emitting}, spinning: {spinning}")
    assert emitting >= STEP_RATE_BOUND * spinning, (emitting, spinning)
    assert m.series["x"].stats().count + m.queue_dropped > 0  # it did emit: recorded or counted as dropped


def test_every_value_emitted_from_a_side_thread_up_to_the_bound_is_recorded_in_order(run_root):
    n = 50_000  # below MAX_QUEUED
    m = make_monitor(make_options(run_dir=run_root, interval_s=3600, name="all"), text=False, probes=False,
                     extensions=[]).start()
    t = threading.Thread(target=lambda: [tm.emit(y=float(i)) for i in range(n)])
    t.start()
    while t.is_alive():
        m.on_step(1)
    t.join()
    m.finish("completed")
    events = read_events(m.run_dir / "events.jsonl")
    values = [v for e in events if e["kind"] == "series" and e["name"] == "y" for v in e["value"]]
    assert values == [float(i) for i in range(n)] and m.queue_dropped == 0
