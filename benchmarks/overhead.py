"""Per-step overhead of trainmeter on a tight CPU loop (issue 2).

A 2-layer MLP (32 -> 32 -> 10), batch 32, small SGD steps, single-threaded.
Two measurements, both printed:

1. End to end, in-process: arms run in blocks of ``--block`` steps, in a shuffled
   order each round so machine noise hits them alike:
   ``bare`` and ``bare-control`` (no monitor; their difference is the noise floor),
   ``monitored`` (inside ``tm.monitor``: step hook, root forward wrapper, loss
   capture, and the default extensions), ``monitored+emit`` (plus
   ``tm.emit(train_loss=loss)`` every step). Prints each arm's median
   microseconds per step, its ratio to bare and the added microseconds.
2. Per component, with ``timeit`` (best of repeats): the added cost of the root
   forward wrapper, the loss capture, the optimizer-step hook and one emit call:
   the code trainmeter adds to a step, without the step's own noise.

Also checks that not one step is lost. Usage:
``python benchmarks/overhead.py [--steps 20000] [--block 250]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import timeit

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainmeter as tm


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
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


def end_to_end(steps: int, block_steps: int, root: str) -> dict[str, list[float]]:
    model, opt, x, y = make()
    block(model, opt, x, y, 1000, False)  # warm-up
    arms: dict[str, list[float]] = {"bare": [], "bare-control": [], "monitored": [], "monitored+emit": []}
    rng = random.Random(0)
    for _ in range(max(1, steps // block_steps)):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            if arm.startswith("bare"):
                arms[arm].append(block(model, opt, x, y, block_steps, False))
                continue
            with tm.monitor(run_dir=root, interval_s=5.0) as m:
                block(model, opt, x, y, 5, False)  # first steps: root discovery
                arms[arm].append(block(model, opt, x, y, block_steps, arm.endswith("emit")))
            assert m.steps == block_steps + 5, m.steps  # not one step lost
    return arms


def components(root: str) -> dict[str, float]:
    """Added microseconds per call of each piece trainmeter adds to a step (best of 7)."""
    model, opt, x, y = make()
    loss = F.cross_entropy(model(x), y)
    n = 20000

    def best(fn) -> float:
        return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6

    inner = nn.Identity()
    bare_forward = best(lambda: inner(x))
    with tm.monitor(run_dir=root, interval_s=3600) as m:
        block(model, opt, x, y, 3, False)
        probes = m.probes
        probes.declare_root(inner)
        out = {"root forward wrapper": best(lambda: inner(x)) - bare_forward}
        detached = loss.detach()
        out["loss capture (Tensor.backward wrapper)"] = best(lambda: probes._on_backward(detached))
        out["optimizer step hook"] = best(lambda: probes._on_step(opt, (), {}))
        out["tm.emit(train_loss=tensor)"] = best(lambda: tm.emit(train_loss=detached))
        out["tm.emit(train_loss=float)"] = best(lambda: tm.emit(train_loss=1.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000, help="steps per arm (>= 20000)")
    ap.add_argument("--block", type=int, default=250)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        arms = end_to_end(args.steps, args.block, root)
        parts = components(root)
    med = {k: statistics.median(v) for k, v in arms.items()}
    bare = med["bare"]
    print(f"end to end: {len(arms['bare']) * args.block} steps per arm in blocks of {args.block}, shuffled rounds")
    for name, value in med.items():
        print(f"  {name:>15}: {value * 1e6:7.1f} us/step  ratio {value / bare:.4f}  "
              f"added {(value - bare) * 1e6:+6.2f} us/step")
    print(f"  noise floor (bare-control vs bare): {(med['bare-control'] - bare) * 1e6:+.2f} us/step")
    print(f"  emit, end to end: {(med['monitored+emit'] - med['monitored']) * 1e6:+.2f} us per call")
    print("per component (timeit, best of 7):")
    for name, us in parts.items():
        print(f"  {name:>40}: {us:6.2f} us")
    per_step = sum(v for k, v in parts.items() if not k.startswith("tm.emit"))
    print(f"  {'added per step (sum, without emit)':>40}: {per_step:6.2f} us")


if __name__ == "__main__":
    main()
