"""Per-rank cost of the rank writer, against a single-process run, at about 1,000 steps/s.

A small MLP on CPU, one thread, sized so a bare step takes about 1 ms. Arms, each
run inside its own ``tm.monitor`` block in a shuffled order every round (so machine
noise hits them alike), timed over ``--block`` steps after 50 warm-up steps:

- ``bare``: no monitor;
- ``single``: an ordinary monitored run (default extensions);
- ``rank``: the same run as rank 0 of a 2-rank launch (``RANK``/``WORLD_SIZE`` set):
  seated in a launch folder, per-rank step timing (optimizer post-hook and
  ``Tensor.backward`` wrapper), ``distributed`` interval fields, merged launch passport.

Prints each arm's median microseconds per step and the ratio rank/single (target:
no more than a single-process run), the rank timing hooks' own cost per step
(``timeit``), and the bytes per second a follower reads from a rank's log written
at that pace (``events.jsonl`` growth over the run). Usage:
``python benchmarks/ranks.py [--rounds 7] [--block 2000] [--interval 1]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import timeit
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainmeter as tm


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    return model, opt, x, y


def steps(model, opt, x, y, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / n


def arm(name: str, root: Path, block: int, interval_s: float, port: int) -> tuple[float, Path | None]:
    model, opt, x, y = make()
    if name == "bare":
        steps(model, opt, x, y, 50)
        return steps(model, opt, x, y, block), None
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": str(port)} if name == "rank" else {}
    os.environ.update(env)
    try:
        with tm.monitor(name=name, run_dir=str(root), interval_s=interval_s) as m:
            steps(model, opt, x, y, 50)
            per_step = steps(model, opt, x, y, block)
    finally:
        for key in env:
            os.environ.pop(key, None)
    return per_step, m.run_dir


def hook_cost_us() -> float:
    """The rank timing's added cost per step: its optimizer post-hook plus the backward wrapper."""
    from trainmeter.ranks.stragglers import StepTiming

    timing = StepTiming()
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    n = 100_000
    hook = min(timeit.repeat(lambda: timing._on_step(opt, (), {}), number=n, repeat=5)) / n
    clock = min(timeit.repeat(lambda: time.perf_counter() - time.perf_counter(), number=n, repeat=5)) / n
    return (hook + clock) * 1e6  # the backward wrapper adds two clock reads and an addition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {"bare": [], "single": [], "rank": []}
    log_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(results)
            random.shuffle(order)
            for name in order:
                per_step, run_dir = arm(name, Path(tmp), args.block, args.interval, 40000 + r)
                results[name].append(per_step)
                if name == "rank" and run_dir is not None:
                    size = (run_dir / "events.jsonl").stat().st_size
                    log_rates.append(size / (per_step * (args.block + 50)))
    med = {k: statistics.median(v) * 1e6 for k, v in results.items()}
    print(f"steps/s (bare): {1e6 / med['bare']:.0f}; {args.rounds} rounds x {args.block} steps, interval {args.interval} s")
    for k, v in med.items():
        print(f"{k:<7} {v:8.1f} us/step  x{v / med['bare']:.3f} of bare")
    print(f"rank/single: x{med['rank'] / med['single']:.3f} ({med['rank'] - med['single']:+.1f} us/step)")
    print(f"rank timing hooks alone: {hook_cost_us():.2f} us/step")
    print(f"a follower reads {statistics.median(log_rates) / 1024:.1f} KiB/s from one rank's log at this pace")


if __name__ == "__main__":
    main()
