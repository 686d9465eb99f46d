"""Bytes per second the live widget puts on the wire, and the publisher thread's CPU, for a monitored hand loop.

A real :class:`~trainmeter.widget.widget.TrainmeterWidget` is fed by its
:class:`~trainmeter.widget.publisher.Publisher`; its comm is a stand-in that serializes every message as
ipykernel's comm does (``json_clean`` of the content, a signed ``jupyter_client`` session message: header,
parent header, metadata, content, then the binary buffers) and counts the bytes of the frames instead of
sending them. No browser, no kernel. So the traitlet updates (``state``, ``history``), the custom messages
(frames, state patches) and their envelopes are all counted as a kernel would put them on iopub, and the
serialization's CPU is paid on the publisher's thread, as in a kernel.

Modes:

- ``real`` (default): the tiny loop of benchmarks/overhead.py (a 32-64-1 MLP, batch 32, MSELoss module, SGD, one
  thread) under a monitor with the default extensions, real clock, the publisher's own thread, for
  ``--seconds`` (as fast as it goes, or paced at ``--steps-per-s``: the same work for two runs on a shared
  machine); prints bytes/s per 10 s window (it must stay flat), by message kind, and the publisher's CPU
  (``time.thread_time`` around each tick, and the thread's whole CPU from ``/proc/self/task/<tid>/schedstat``),
  per second and per 1,000 steps.
- ``sim``: the same monitor on a :class:`~trainmeter.core.clock.FakeClock`, ``--minutes`` simulated minutes at
  ``--steps-per-s``, the publisher ticked every 0.25 s of fake time (steps through ``on_step``, a loss every
  step, a validation loss every 500): the bytes/s of a long cell in seconds, per simulated minute.

Usage (the repository root on ``PYTHONPATH`` with ``src``)::

    python benchmarks/widget_bytes.py real --seconds 60 [--steps-per-s 1000]
    python benchmarks/widget_bytes.py sim --minutes 10

Measured: docs/protocol.md section 2.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


# -- the counting comm ------------------------------------------------------------------------------
class Wire:
    """Every message the widget's comm would publish: (clock s, kind, bytes)."""

    def __init__(self, clock: Any) -> None:
        from jupyter_client.session import Session

        self.clock = clock
        self.session = Session(key=b"widget-bytes-benchmark", username="bench")
        self.parent = self.session.msg("execute_request", {"code": "train()"})
        self.log: list[tuple[float, str, int]] = []
        self.lock = threading.Lock()

    def count(self, msg_type: str, content: dict[str, Any], metadata: dict[str, Any] | None,
              buffers: list[Any] | None) -> None:
        from ipykernel.jsonutil import json_clean

        msg = self.session.msg(msg_type, json_clean(content), parent=self.parent, metadata=json_clean(metadata or {}))
        frames = self.session.serialize(msg)
        size = sum(len(f) for f in frames) + sum(memoryview(b).nbytes for b in buffers or [])
        with self.lock:
            self.log.append((self.clock(), kind_of(msg_type, content), size))


def kind_of(msg_type: str, content: dict[str, Any]) -> str:
    """``open``, ``update:<traits>`` or ``custom:<kind>`` for one comm message."""
    data = content.get("data") or {}
    if msg_type == "comm_open":
        return "open"
    if data.get("method") == "update":
        keys = [*(data.get("state") or {}), *(".".join(map(str, path)) for path in data.get("buffer_paths") or [])]
        return "update:" + ",".join(sorted(keys))
    if data.get("method") == "custom":
        return "custom:" + str((data.get("content") or {}).get("kind"))
    return msg_type


def counting_comms(wire: Wire) -> None:
    """Make ``comm.create_comm`` (what ipywidgets opens a widget's comm with) count onto ``wire``."""
    import comm
    from comm.base_comm import BaseComm

    class CountingComm(BaseComm):
        def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                        **keys: Any) -> None:
            wire.count(msg_type, dict(data=data or {}, comm_id=self.comm_id, **keys), metadata, buffers)

    comm.create_comm = CountingComm  # type: ignore[assignment]


def thread_cpu_s(native_id: int | None) -> float:
    """CPU seconds of one thread of this process (``/proc/self/task/<tid>/schedstat``), 0 when unreadable."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, TypeError):
        return 0.0


def timed_publisher(base: type) -> type:
    """A Publisher whose ticks add up their own thread's CPU (``time.thread_time``)."""

    class Timed(base):  # type: ignore[misc, valid-type]
        tick_cpu_s = 0.0
        ticks = 0

        def tick(self, now_s: float | None = None) -> int:
            t0 = time.thread_time()
            try:
                return super().tick(now_s)
            finally:
                self.tick_cpu_s += time.thread_time() - t0
                self.ticks += 1

    return Timed


# -- the runs ---------------------------------------------------------------------------------------
def _monitor(root: str, clock: Any = None) -> Any:
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.options import make_options

    options = make_options(name="widget-bytes", run_dir=root)
    kwargs: dict[str, Any] = {"text": False, "extensions": default_extensions(options), "out": io.StringIO()}
    if clock is not None:
        kwargs["clock"] = clock
    return make_monitor(options, **kwargs)


def _widget(m: Any) -> Any:
    from trainmeter.widget.view_model import build_state, facts_from_monitor
    from trainmeter.widget.widget import TrainmeterWidget

    return TrainmeterWidget(state=build_state(facts_from_monitor(m.context)))


def real(seconds: float, steps_per_s: float = 0.0) -> dict[str, Any]:
    """A real monitored hand loop for ``seconds`` with the publisher's thread (paced at ``steps_per_s`` when > 0)."""
    import torch
    import torch.nn as nn

    from trainmeter.api import run_monitored
    from trainmeter.widget.publisher import Publisher

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()
    x, y = torch.randn(32, 32), torch.randn(32, 1)
    t0 = time.perf_counter()
    wire = Wire(lambda: time.perf_counter() - t0)
    counting_comms(wire)
    with tempfile.TemporaryDirectory() as root:
        m = _monitor(root)
        widget = _widget(m)
        pub = timed_publisher(Publisher)(m.context, widget)
        widget.attach(pub)
        with run_monitored(m, model=model):
            pub.start()
            begun = time.perf_counter()
            deadline = begun + seconds
            done = 0
            while time.perf_counter() < deadline:
                for _ in range(50):
                    loss = loss_fn(model(x), y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                done += 50
                if steps_per_s > 0:  # paced: wait for the schedule (a slow machine simply falls behind it)
                    time.sleep(max(0.0, begun + done / steps_per_s - time.perf_counter()))
            cpu_thread = thread_cpu_s(pub._thread.native_id if pub._thread else None)
            live_s = time.perf_counter() - t0
            live_n = len(wire.log)
        pub.close()
    return {"mode": "real", "seconds": live_s, "steps": m.steps, "log": wire.log, "live_n": live_n,
            "tick_cpu_s": pub.tick_cpu_s,
            "ticks": pub.ticks, "thread_cpu_s": cpu_thread}


def sim(minutes: float, steps_per_s: float) -> dict[str, Any]:
    """``minutes`` simulated minutes on a FakeClock, the publisher ticked every 0.25 s."""
    from stream import synthetic_steps

    from trainmeter.core.clock import FakeClock
    from trainmeter.widget.publisher import Publisher

    clock = FakeClock(0.0)
    wire = Wire(clock)
    counting_comms(wire)
    with tempfile.TemporaryDirectory() as root:
        m = _monitor(root, clock).start()
        widget = _widget(m)
        pub = timed_publisher(Publisher)(m.context, widget, clock=clock)
        widget.attach(pub)
        per_tick = max(1, round(steps_per_s * 0.25))
        dt = 0.25 / per_tick
        end_s = minutes * 60.0
        while clock() < end_s:
            synthetic_steps(m, clock, per_tick, dt)  # benchmarks/stream.py's run
            pub.tick()
        live_s = clock()
        live_n = len(wire.log)
        m.finish("completed")
        pub.close()
    return {"mode": "sim", "seconds": live_s, "steps": m.steps, "log": wire.log, "live_n": live_n,
            "tick_cpu_s": pub.tick_cpu_s,
            "ticks": pub.ticks, "thread_cpu_s": None}


# -- the report -------------------------------------------------------------------------------------
def report(r: dict[str, Any], window_s: float) -> str:
    log: list[tuple[float, str, int]] = r["log"]
    live_s = r["seconds"]
    live = [e for e in log[:r["live_n"]] if e[1] != "open"]
    total = sum(n for _, _, n in live)
    lines = [f"{r['mode']}: {live_s:,.1f} s live, {r['steps']:,} steps, {len(live):,} messages while live"]
    lines.append(f"  bytes/s on the wire while live: {total / live_s:,.0f} (open: "
                 f"{sum(n for _, k, n in log if k == 'open'):,} B once; at the close: "
                 f"{sum(n for _, _, n in log[r['live_n']:]):,} B once)")
    by_kind: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for _, k, n in live:
        by_kind[k] += n
        counts[k] += 1
    for k, n in by_kind.most_common():
        lines.append(f"    {k:<40} {n / live_s:>9,.0f} B/s  {100 * n / max(1, total):5.1f}%  "
                     f"{counts[k]:>6,} msgs, {n / counts[k]:>8,.0f} B each")
    windows: list[str] = []
    t = 0.0
    while t + window_s <= live_s + 1e-9:
        n = sum(b for s, _, b in live if t <= s < t + window_s)
        windows.append(f"{n / window_s:,.0f}")
        t += window_s
    lines.append(f"  bytes/s per {window_s:g} s window: {' '.join(windows)}")
    if windows:
        w = [float(v.replace(',', '')) for v in windows]
        lines.append(f"  max window {max(w):,.0f} B/s; last window {w[-1]:,.0f} B/s")
    per_k = 1e6 / max(1, r["steps"])  # ms per 1,000 steps, from seconds
    lines.append(f"  publisher tick CPU: {1000 * r['tick_cpu_s'] / live_s:.2f} ms per s, "
                 f"{per_k * r['tick_cpu_s']:.3f} ms per 1,000 steps ({r['ticks']:,} ticks, "
                 f"{1000 * r['tick_cpu_s'] / max(1, r['ticks']):.2f} ms each)")
    if r.get("thread_cpu_s") is not None:
        lines.append(f"  publisher thread CPU (schedstat): {1000 * r['thread_cpu_s'] / live_s:.2f} ms per s, "
                     f"{per_k * r['thread_cpu_s']:.3f} ms per 1,000 steps")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("real", "sim"), default="real")
    parser.add_argument("--seconds", type=float, default=60.0, help="real: seconds of training")
    parser.add_argument("--minutes", type=float, default=10.0, help="sim: simulated minutes")
    parser.add_argument("--steps-per-s", type=float, default=None,
                        help="real: pace the loop (default: as fast as it goes); sim: steps per simulated second "
                             "(default 1000)")
    args = parser.parse_args()
    if args.mode == "real":
        print(report(real(args.seconds, args.steps_per_s or 0.0), 10.0))
    else:
        print(report(sim(args.minutes, args.steps_per_s or 1000.0), 60.0))


if __name__ == "__main__":
    main()
