"""Bytes sent to the browser by the widget publisher for synthetic runs.

A real :class:`~trainmeter.core.monitor.Monitor` on a fake clock (no sleeping) trains
N steps with a loss every step and a validation loss every 500 steps; the
publisher ticks every 0.25 s of fake time into a counting stand-in for the
widget. Payload bytes are counted as the publisher sends them (frame bytes,
message and state JSON; the Jupyter envelope is not included).

Two tables:

- *same step rate* (1,000 steps/s): 10k, 100k and 1M steps last 10 s, 100 s and
  1,000 s; bytes per second must stay flat past the decimation budget;
- *same duration* (100 s): 10k, 100k and 1M steps (100 to 10,000 steps/s); total
  bytes must not grow with the step count.

The browser's frame time with the full history loaded (Chromium) is
:func:`browser_frame_time_ms`, a stub for the lead to fill in; it is skipped when
Playwright or Chromium is missing.

Usage: ``python benchmarks/stream.py [--sizes 10000 100000 1000000]``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainmeter.core.clock import FakeClock
from trainmeter.core.memory import MemoryReading
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget.publisher import Publisher

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the frame decoder lives with the tests
from tests.widget.wire_types import decode_frame  # noqa: E402

TICK_S = 0.25


class CountingWidget:
    """Stands in for the widget: records (fake time, kind, payload bytes) of every message."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.log: list[tuple[float, str, int]] = []
        self._state: dict[str, Any] = {}
        self._history = b""

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._state = value
        self.log.append((self.clock(), "state", len(json.dumps(value))))

    @property
    def history(self) -> bytes:
        return self._history

    @history.setter
    def history(self, frame: bytes) -> None:
        self._history = frame
        self.log.append((self.clock(), "history", len(frame)))

    def send(self, content: dict[str, Any], buffers: list[Any] | None = None) -> None:
        size = len(json.dumps(content)) + sum(len(b) for b in buffers or [])
        self.log.append((self.clock(), content["kind"], size))


def synthetic_steps(m: Any, clock: FakeClock, n: int, dt: float) -> None:
    """``n`` steps of the synthetic run, ``dt`` fake seconds each: a loss every step, a validation loss every 500."""
    for _ in range(n):
        clock.advance(dt)
        s = m.steps
        m.on_step(1024, loss_value=2.0 + math.exp(-s / 20000.0) + 0.05 * math.sin(s / 37.0))
        if s % 500 == 0:
            m.record({"val_loss": 2.1 + math.exp(-s / 20000.0)})


def run(steps: int, steps_per_s: float, root: Path) -> dict[str, Any]:
    """One synthetic run; returns its stream figures."""
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=root, name=f"stream{steps}", interval_s=10.0), clock=clock, text=False,
                probes=False, out=io.StringIO())
    m.start()
    m.lifecycle.memory_probe.sample = lambda: MemoryReading(rss_bytes=2 * 10**9, rss_peak_bytes=2 * 10**9)
    widget = CountingWidget(clock)
    pub = Publisher(m.context, widget, clock=clock)
    per_tick = max(1, round(steps_per_s * TICK_S))
    dt = TICK_S / per_tick
    while m.steps < steps:
        synthetic_steps(m, clock, min(per_tick, steps - m.steps), dt)
        pub.tick()
    m.finish("completed")
    pub.close()
    duration_s = clock()
    tail_from = 0.9 * duration_s
    tail = sum(n for t, _, n in widget.log if t >= tail_from)
    times = [t for t, _, _ in widget.log]
    j, peak = 0, 0
    for i, t in enumerate(times):  # most messages in any 1 s window (times are sorted)
        while times[j] <= t - 1.0:
            j += 1
        peak = max(peak, i - j + 1)
    history = decode_frame(widget.history)
    return {
        "steps": m.steps, "duration_s": duration_s, "messages": len(widget.log),
        "bytes": sum(n for _, _, n in widget.log), "bytes_per_s": sum(n for _, _, n in widget.log) / duration_s,
        "tail_bytes_per_s": tail / (duration_s - tail_from), "max_message": max(n for _, _, n in widget.log),
        "max_per_s": peak, "history_bytes": len(widget.history),
        "history_points": max(len(s.xs) for s in history.series),
    }


def table(title: str, rows: list[dict[str, Any]]) -> str:
    head = (f"{title}\n| steps | run (s) | messages | max msgs/s | total bytes | bytes/s | bytes/s, last 10% "
            "| largest msg | final history (bytes, points/series) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    lines = [f"| {r['steps']:,} | {r['duration_s']:,.0f} | {r['messages']:,} | {r['max_per_s']} | {r['bytes']:,} "
             f"| {r['bytes_per_s']:,.0f} | {r['tail_bytes_per_s']:,.0f} | {r['max_message']:,} "
             f"| {r['history_bytes']:,}, {r['history_points']:,} |" for r in rows]
    return "\n".join([head, *lines])


def browser_frame_time_ms(page: Any) -> dict[str, float] | None:
    """Chromium frame time with the full history loaded: TO BE WRITTEN by the lead.

    Intended: in a Playwright ``page`` showing a notebook whose widget holds a
    1M-step history, sample ``requestAnimationFrame`` intervals while the store
    appends, and return ``{"p50_ms", "p95_ms", "max_ms"}``. Returns ``None`` (skipped)
    when Playwright or Chromium is missing, or no page is given.
    """
    try:
        import playwright  # noqa: F401
    except ImportError:
        return None
    if shutil.which("chromium") is None or page is None:
        return None
    raise NotImplementedError("browser_frame_time_ms: the Chromium measurement is added by the lead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(table("Same step rate (1,000 steps/s):", [run(n, 1000.0, root) for n in args.sizes]))
        print()
        print(table("Same duration (100 s):", [run(n, n / 100.0, root) for n in args.sizes]))
    frame = browser_frame_time_ms(None)
    print("\nbrowser frame time:", "skipped (stub; needs Playwright, Chromium and a page)" if frame is None else frame)


if __name__ == "__main__":
    main()
