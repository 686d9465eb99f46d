"""Memory a monitored run holds: RSS growth, points held between reports, what stays alive after the run.

Three measurements (figures only, no timed asserts; compare branches side by side):

- *fake clock*: a real :class:`~trainmeter.core.monitor.Monitor` (run log written, optim extension on) on a
  :class:`~trainmeter.core.clock.FakeClock` at ``--rate`` steps/s (60,000 by default), the default wings, a 10 s interval and a
  widget publisher ticking every 0.25 s of fake time into a counting stand-in; a loss every step. Reported per
  size: RSS growth over the run (``VmRSS`` after ``gc.collect``), the most points held in the run's series at
  any publisher tick (between reports), and after ``finish`` + the publisher's close: the RSS still added and the
  points still held by the run's series (the publisher stays referenced, as the widget registry keeps the last).
- *real loop*: ``tm.monitor(interval_s=60)`` around a tiny torch model (SGD on a 16x1 linear layer, real clock) for
  ``--real-steps`` steps: RSS growth and the most points held (looked at every 1,000 steps).
- *after the run*: with every reference of the benchmark's own dropped, whether the monitor object is still
  alive (a weak reference) and who refers to it (``gc.get_referrers``, module globals named).
- *Python heap*: the fake-clock runs again under ``tracemalloc``: the peak during the run and what is still held
  after it (the publisher referenced), RSS aside (the allocator keeps freed arenas).

Usage: ``PYTHONPATH=src python benchmarks/memory.py [--sizes 200000 1000000] [--rate 60000] [--real-steps 20000]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import math
import sys
import tempfile
import tracemalloc
import types
import weakref
from pathlib import Path
from typing import Any

from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.extensions import default_extensions, make_monitor
from trainmeter.options import make_options
from trainmeter.widget.publisher import Publisher

TICK_S = 0.25
MIB = 1 << 20


def rss_bytes() -> int:
    """This process's resident set (``VmRSS``), after a full collection."""
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class NullWidget:
    """Stands in for the widget: takes every message and keeps only the last history frame."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.history = b""
        self.messages = 0

    def send(self, content: dict[str, Any], buffers: list[Any] | None = None) -> None:
        self.messages += 1


def held_points(m: Any) -> int:
    """Points the run's series hold in memory now (every series and the step series)."""
    return sum(s.pending for s in (m.step_series, *list(m.series.values())))


def fake_run(steps: int, rate: float, root: Path, trace: bool = False) -> dict[str, Any]:
    """One fake-clock run of ``steps`` steps at ``rate`` steps/s; returns its memory figures."""
    clock = FakeClock(0.0)
    before = rss_bytes()
    if trace:
        tracemalloc.start()
        heap_before = tracemalloc.get_traced_memory()[0]
    options = make_options(run_dir=root, name=f"mem{steps}", interval_s=10.0)
    m = make_monitor(options, clock=clock, text=False, probes=False, out=io.StringIO(),
                     extensions=default_extensions(options))
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=2 * 10**9, rss_peak_bytes=2 * 10**9)
    pub = Publisher(m.context, NullWidget(), clock=clock)
    per_tick = max(1, round(rate * TICK_S))
    dt = TICK_S / per_tick
    peak_held = 0
    while m.steps < steps:
        for _ in range(min(per_tick, steps - m.steps)):
            clock.advance(dt)
            s = m.steps
            m.on_step(1024, loss_value=2.0 + math.exp(-s / 20000.0) + 0.05 * math.sin(s / 37.0))
        peak_held = max(peak_held, held_points(m))
        pub.tick()
    during = rss_bytes()
    m.finish("completed")
    pub.close()
    after = rss_bytes()
    heap_peak = heap_after = 0.0
    if trace:
        heap_after = (tracemalloc.get_traced_memory()[0] - heap_before) / MIB
        heap_peak = (tracemalloc.get_traced_memory()[1] - heap_before) / MIB
        tracemalloc.stop()
    ref = weakref.ref(m)
    held_after = held_points(m)
    del m
    gc.collect()
    alive_with_publisher = ref() is not None
    del pub
    gc.collect()
    alive = ref()
    return {"steps": steps, "rate": rate, "rss_run_mib": (during - before) / MIB,
            "rss_after_mib": (after - before) / MIB, "peak_held": peak_held, "heap_peak_mib": heap_peak,
            "heap_after_mib": heap_after, "held_after": held_after,
            "alive_with_publisher": alive_with_publisher, "alive": alive is not None,
            "referrers": referrers(alive) if alive is not None else []}


def referrers(obj: Any) -> list[str]:
    """Who refers to ``obj``: module globals by name, else the referrer's type."""
    out = []
    for r in gc.get_referrers(obj):
        if isinstance(r, types.FrameType):
            continue
        if isinstance(r, dict):
            mod = next((name for name, mm in list(sys.modules.items())
                        if getattr(mm, "__dict__", None) is r), None)
            if mod is not None:
                key = next((k for k, v in r.items() if v is obj), "?")
                out.append(f"{mod}.{key}")
                continue
        out.append(type(r).__name__)
    return out


def real_run(steps: int, root: Path) -> dict[str, Any]:
    """``tm.monitor(interval_s=60)`` around a tiny torch loop of ``steps`` steps (real clock)."""
    import torch

    import trainmeter.api as tm

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    before = rss_bytes()
    held_end = 0
    with contextlib.redirect_stdout(io.StringIO()), tm.monitor(run_dir=root, name="memreal", interval_s=60) as m:
        for i in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if i % 1000 == 0:
                held_end = max(held_end, held_points(m))
        elapsed_s = m.elapsed_s()
    after = rss_bytes()
    ref = weakref.ref(m)
    held_after = held_points(m)
    del m
    gc.collect()
    alive = ref()
    return {"steps": steps, "rate": steps / max(elapsed_s, 1e-9), "rss_after_mib": (after - before) / MIB,
            "held_end": held_end, "held_after": held_after, "alive": alive is not None,
            "referrers": referrers(alive) if alive is not None else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--rate", type=float, default=60_000.0)
    parser.add_argument("--real-steps", type=int, default=60_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake_run(20_000, args.rate, root)  # warm-up: the wings' imports and first allocations are not counted
        print(f"Fake clock, {args.rate:,.0f} steps/s, 10 s interval, publisher every {TICK_S} s:")
        print("| steps | RSS added during run (MiB) | most points held at a tick | RSS added after finish (MiB) "
              "| points held after finish | run alive with publisher | run alive without |")
        print("|---:|---:|---:|---:|---:|---|---|")
        for n in args.sizes:
            r = fake_run(n, args.rate, root)
            print(f"| {n:,} | {r['rss_run_mib']:+.1f} | {r['peak_held']:,} | {r['rss_after_mib']:+.1f} "
                  f"| {r['held_after']:,} | {r['alive_with_publisher']} | {r['alive']} {r['referrers']} |")
        print("\nSame runs under tracemalloc (Python heap, MiB over the start):\n| steps | peak during run "
              "| held after finish (publisher referenced) |\n|---:|---:|---:|")
        for n in args.sizes:
            r = fake_run(n, args.rate, root, trace=True)
            print(f"| {n:,} | {r['heap_peak_mib']:+.1f} | {r['heap_after_mib']:+.1f} |")
        if args.real_steps:
            r = real_run(args.real_steps, root)
            print(f"\nReal loop (tm.monitor, 60 s interval, Linear(16,1), SGD), {r['steps']:,} steps at "
                  f"{r['rate']:,.0f} steps/s:")
            print(f"RSS added after the run: {r['rss_after_mib']:+.1f} MiB; most points held (every 1,000 steps): "
                  f"{r['held_end']:,}; after: {r['held_after']:,}; run alive: {r['alive']} {r['referrers']}")


if __name__ == "__main__":
    main()
