"""What side threads calling ``tm.emit`` flat out cost the training thread (issue 40 item 8; docs/spec.md section 18).

Each arm runs in a fresh process (``OMP_NUM_THREADS=1``): the overhead benchmark's tiny loop (a 32-64-1 MLP, batch
32, MSE, SGD) trains for ``--seconds`` under ``tm.monitor`` beside ``--threads`` side threads that call, flat out:

- ``spin``: a function of ``tm.emit``'s shape that does nothing (the GIL contention any busy Python thread brings);
- ``emit``: ``tm.emit(x<k>=float(i))``, each thread its own series;
- ``alone``: no side thread (the step rate the others are compared with).

- ``bad``: ``tm.emit(x<k>="text")``, a value left out (warned once, then counted: ``emits_ignored``);
- ``full``: ``tm.emit`` with the cross-thread queue full (its bound set to 0: every value dropped, ``emits_dropped``);
- ``alone``: no side thread (the step rate the others are compared with).

Printed per arm: the training thread's steps per second, its own CPU microseconds per step (``time.thread_time``:
the work done on that thread, whatever the wait for the GIL), the side threads' calls per second, and the ratios
of each arm to spin. The arms alternate ``--pairs`` times; medians. A figure, not a timed assert.

``--count``: no training; for each kind of value (good, bad, full, reserved) one side thread emits 20,000 and what
trainmeter does for each is counted on every thread (its Python bytecodes, by ``sys.settrace`` opcode events, and
its Python calls), with the process CPU microseconds per value in an untraced run (a timing, loose under load).

Usage (the repository root on ``PYTHONPATH`` with ``src``)::

    python benchmarks/emit_threads.py [--threads 4] [--seconds 3] [--pairs 3]
    python benchmarks/emit_threads.py --count
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
import warnings


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
        call = spin if kind == "spin" else tm.emit  # alone: no side thread
        name, i = f"x{k}", 0
        while not stop.is_set():
            call(**{name: "text" if kind == "bad" else float(i)})
            i += 1
        calls[k] = i

    if kind == "full":
        from trainmeter.core import emits

        emits.MAX_QUEUED = 0

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


COUNT_VALUES = 20_000


def _count(kind: str) -> dict[str, float]:
    """Per value of ``kind`` emitted from one side thread: trainmeter's bytecodes and calls (every thread), CPU us."""
    import trainmeter as tm
    from trainmeter.core import emits

    counts = {"bytecodes": 0, "calls": 0}

    def trace(frame, event, arg):
        if "/trainmeter/" not in frame.f_code.co_filename:
            return None
        if event == "call":
            counts["calls"] += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            counts["bytecodes"] += 1
        return trace

    name, value = {"good": ("x", 1.0), "bad": ("x", "text"), "full": ("x", 1.0), "reserved": ("node.cpu", 1.0)}[kind]
    if kind == "full":
        emits.MAX_QUEUED = 0

    def side() -> None:
        for _ in range(COUNT_VALUES):
            tm.emit(**{name: value})

    cpu_s = []
    for traced in (False, True):
        with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tm.monitor(run_dir=root, name=kind, interval_s=3600):
                tm.emit(warm=1.0)
                c0 = time.process_time()
                if traced:
                    threading.settrace(trace)
                    sys.settrace(trace)  # this thread folds what is left (below)
                thread = threading.Thread(target=side)
                thread.start()
                thread.join()
                tm.api._monitor_module._ACTIVE.emitter.close()  # type: ignore[attr-defined]  # fold the rest now
                sys.settrace(None)
                threading.settrace(None)
                cpu_s.append(time.process_time() - c0)
    return {"bytecodes": counts["bytecodes"] / COUNT_VALUES, "calls": counts["calls"] / COUNT_VALUES,
            "cpu_us": cpu_s[0] / COUNT_VALUES * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help="count trainmeter's work per emitted value, per kind")
    args = parser.parse_args()
    if args.count:
        print(f"per value, {COUNT_VALUES:,} from one side thread: trainmeter's bytecodes and calls (all threads)")
        for kind in ("good", "bad", "full", "reserved"):
            out = subprocess.run([sys.executable, __file__, "--arm", f"count-{kind}"], env={**os.environ,
                                 "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=True)
            c = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"  {kind:8s} {c['bytecodes']:7.1f} bytecodes, {c['calls']:5.2f} calls, "
                  f"{c['cpu_us']:6.2f} us CPU (untraced, all threads)")
        return
    if args.arm and args.arm.startswith("count-"):
        print(json.dumps(_count(args.arm[len("count-"):])))
        return
    if args.arm:
        print(json.dumps(_arm(args.arm, args.threads, args.seconds)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    arms = ("alone", "spin", "emit", "bad", "full")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in arms}
    for pair in range(args.pairs):
        for kind in (arms if pair % 2 == 0 else arms[::-1]):
            threads_n = 0 if kind == "alone" else args.threads
            out = subprocess.run([sys.executable, __file__, "--arm", kind, "--threads", str(threads_n),
                                  "--seconds", str(args.seconds)], env=env, capture_output=True, text=True, check=True)
            results[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {kind: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for kind, rows in results.items()}
    print(f"{args.threads} side threads, {args.seconds:g} s an arm, medians of {args.pairs} processes each")
    for kind, m in med.items():
        print(f"  {kind:5s} training {m['steps_per_s']:8.0f} steps/s, {m['cpu_us_per_step']:6.1f} us CPU/step; "
              f"side calls {m['side_calls_per_s']:10.0f}/s")
    print(f"  spin/alone: steps/s {med['spin']['steps_per_s'] / med['alone']['steps_per_s']:.2f}x")
    for kind in ("emit", "bad", "full"):
        print(f"  {kind}/alone: steps/s {med[kind]['steps_per_s'] / med['alone']['steps_per_s']:.2f}x; {kind}/spin: "
              f"steps/s {med[kind]['steps_per_s'] / med['spin']['steps_per_s']:.2f}x, training CPU per step "
              f"{med[kind]['cpu_us_per_step'] / med['spin']['cpu_us_per_step']:.2f}x")


if __name__ == "__main__":
    main()
