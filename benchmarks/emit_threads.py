"""What side threads calling ``tm.emit`` flat out cost the training thread (issue 40 item 8; docs/spec.md section 18).

Each arm runs in a fresh process (``OMP_NUM_THREADS=1``): the overhead benchmark's tiny loop (a 32-64-1 MLP, batch
32, MSE, SGD) trains for ``--seconds`` under ``tm.monitor`` beside ``--threads`` side threads that call, flat out:

- ``spin``: a function of ``tm.emit``'s shape that does nothing (the GIL contention any busy Python thread brings);
- ``emit``: ``tm.emit(x<k>=float(i))``, each thread its own series;
- ``alone``: no side thread (the step rate the others are compared with).

Printed per arm: the training thread's steps per second, its own CPU microseconds per step (``time.thread_time``:
the work done on that thread, whatever the wait for the GIL), the side threads' calls per second, and the ratios
emit / spin of each. The arms alternate ``--pairs`` times; medians. A figure, not a timed assert.

Usage (the repository root on ``PYTHONPATH`` with ``src``)::

    python benchmarks/emit_threads.py [--threads 4] [--seconds 3] [--pairs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def _arm(kind: str, threads_n: int, seconds: float) -> dict[str, float]:
    import torch

    import trainmeter as tm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 32), torch.randn(32, 1)
    stop = threading.Event()
    calls = [0] * threads_n

    def spin(**values: float) -> None:
        return None

    def side(k: int) -> None:
        call = tm.emit if kind == "emit" else spin  # alone: no side thread
        name, i = f"x{k}", 0
        while not stop.is_set():
            call(**{name: float(i)})
            i += 1
        calls[k] = i

    with tempfile.TemporaryDirectory() as root, tm.monitor(run_dir=root, name=kind, interval_s=1.0):
        for _ in range(50):  # warm
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sides = [threading.Thread(target=side, args=(k,), daemon=True) for k in range(threads_n)]
        for t in sides:
            t.start()
        steps, t0, c0 = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - t0 < seconds:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        wall_s, cpu_s = time.perf_counter() - t0, time.thread_time() - c0
        stop.set()
        for t in sides:
            t.join()
    return {"steps_per_s": steps / wall_s, "cpu_us_per_step": cpu_s / steps * 1e6,
            "side_calls_per_s": sum(calls) / wall_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(_arm(args.arm, args.threads, args.seconds)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results: dict[str, list[dict[str, float]]] = {"alone": [], "spin": [], "emit": []}
    for pair in range(args.pairs):
        for kind in (("alone", "spin", "emit") if pair % 2 == 0 else ("emit", "spin", "alone")):
            threads_n = 0 if kind == "alone" else args.threads
            out = subprocess.run([sys.executable, __file__, "--arm", kind, "--threads", str(threads_n),
                                  "--seconds", str(args.seconds)], env=env, capture_output=True, text=True, check=True)
            results[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {kind: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for kind, rows in results.items()}
    print(f"{args.threads} side threads, {args.seconds:g} s an arm, medians of {args.pairs} processes each")
    for kind, m in med.items():
        print(f"  {kind:5s} training {m['steps_per_s']:8.0f} steps/s, {m['cpu_us_per_step']:6.1f} us CPU/step; "
              f"side calls {m['side_calls_per_s']:10.0f}/s")
    print(f"  spin/alone: steps/s {med['spin']['steps_per_s'] / med['alone']['steps_per_s']:.2f}x; "
          f"emit/alone: {med['emit']['steps_per_s'] / med['alone']['steps_per_s']:.2f}x")
    print(f"  emit/spin: steps/s {med['emit']['steps_per_s'] / med['spin']['steps_per_s']:.2f}x, "
          f"training CPU per step {med['emit']['cpu_us_per_step'] / med['spin']['cpu_us_per_step']:.2f}x")


if __name__ == "__main__":
    main()
