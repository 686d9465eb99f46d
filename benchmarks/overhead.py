"""Per-step overhead of trainmeter on a tight CPU loop (issue 2).

A 2-layer MLP, batch 32, small SGD steps. Arms run in-process, alternated in
blocks so machine noise hits them alike:

- ``bare``: no monitor;
- ``monitored``: inside ``tm.monitor`` (probes: optimizer hook, root pre-hook, loss capture);
- ``monitored+emit``: same, plus ``tm.emit(train_loss=loss)`` every step.

Prints the median per-step time of each arm, the ratio to bare and the added
microseconds per step (and per emit). Usage: ``python benchmarks/overhead.py [--steps 24000]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainmeter as tm


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    return model, opt, x, y


def block(model, opt, x, y, steps: int, emit: bool) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if emit:
            tm.emit(train_loss=loss)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24000, help="steps per arm (>= 20000)")
    ap.add_argument("--block", type=int, default=500)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, opt, x, y = make()
    block(model, opt, x, y, 500, False)  # warm-up
    arms: dict[str, list[float]] = {"bare": [], "monitored": [], "monitored+emit": []}
    rounds = args.steps // args.block
    with tempfile.TemporaryDirectory() as root:
        for r in range(rounds):
            arms["bare"].append(block(model, opt, x, y, args.block, False))
            with tm.monitor(run_dir=root, interval_s=5.0) as m1:
                block(model, opt, x, y, 20, False)  # first steps: root discovery
                order = ["monitored", "monitored+emit"] if r % 2 else ["monitored+emit", "monitored"]
                for arm in order:
                    arms[arm].append(block(model, opt, x, y, args.block, arm.endswith("emit")))
            assert m1.steps == 2 * args.block + 20, m1.steps
    med = {k: statistics.median(v) for k, v in arms.items()}
    bare = med["bare"]
    print(f"steps per arm: {rounds * args.block}, block {args.block}, rounds {rounds}")
    for name, value in med.items():
        print(f"{name:>16}: {value * 1e6:8.1f} us/step  ratio {value / bare:.4f}  added {(value - bare) * 1e6:+.2f} us/step")
    print(f"emit cost: {(med['monitored+emit'] - med['monitored']) * 1e6:+.2f} us per call")
    paired = [m - b for m, b in zip(arms["monitored"], arms["bare"], strict=False)]
    print(f"paired monitored-bare per round (us/step): median {statistics.median(paired) * 1e6:+.2f}")


if __name__ == "__main__":
    main()
