"""Instructions per empty optimizer step, side by side with the peer (docs/spec.md section 20; issue 37).

An empty step is ``opt.step()`` and ``opt.zero_grad(set_to_none=True)`` with no forward or backward in between (a
gradient-accumulation schedule, a skipped loss): a steady primary optimizer's empty step goes from the step hook
straight to the step rule (core/wrappers.py ``step_hook``). The table is benchmarks/peer_table.py's, run on an
``empty`` loop through its own machinery (imported, not copied: the peer's venv, the arms, callgrind with
``--separate-threads=yes`` and ``--fair-sched=yes``, ``OMP_NUM_THREADS=1``, ``PYTHONHASHSEED=0``, ``gc.freeze``
before each slope, one idle thread before it, ``--slow-threads``, ``--repeats``, ``--keep``): instructions on the training thread per
empty step, the slope between a short and a long segment (2,000 and 6,000 empty steps, after 200 warm-up) minus the
same slope of the bare loop measured first in that process. Each ``steps(n)`` call first runs two real steps of
benchmarks/overhead.py's tiny MLP loop (so the optimizer is the steady primary when the empty steps come), then
``n`` empty steps: the real steps are the same in both segments, so the slope holds only the empty steps. A warm-up
call runs 20 real steps, so each monitor's one-off work is done before the slope (the peer's FLOP count of one
step, after its 5th counted step: the peer counts no empty step, "optimizer steps back to back count as one").

Arms: ``peer`` (trainmeter 0.0.7's agent), ``preloaded`` (``tm.preload()`` then ``tm.monitor()``), ``magic``
(``%%trainmeter``), optionally ``floor`` (a step hook and one clock read) and the others peer_table.py knows.

Then, unless ``--no-native``, microseconds per empty step natively (best of ``--native-repeat`` timeit runs of
``--native-steps`` empty steps, on the training thread's CPU clock, ``time.thread_time``, so time spent waiting for
a core on a loaded machine is left out; no valgrind), each arm in a fresh process: the bare loop first, then the
arm's, as ratios to the bare step, and the arm's step post-hook alone, called directly. A printed comparison, never
a timed assert.

Usage: ``python benchmarks/empty_step.py [--arm peer --arm preloaded ...] [--slow-threads 40] [--no-callgrind]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peer_table as pt

HERE = Path(__file__).resolve()
ARMS = ("peer", "preloaded", "magic")
NATIVE_ARMS = ("peer", "preloaded")
SEGMENTS = (200, 2000, 6000)  # warm-up, short and long segment (empty steps)
REAL_STEPS = 2  # real steps at the start of each steps(n) call: the same in both segments
WARMUP_REAL_STEPS = 20  # ... of a warm-up call (fewer steps than the short segment): one-offs done before the slope


def make_empty_loop() -> tuple[Callable[[int], None], Callable[[int], None], Any, Any]:
    """``steps(n)`` (two real steps, then ``n`` empty ones), ``empty(n)`` (``n`` empty steps), the model and its
    optimizer: benchmarks/overhead.py's tiny loop (a 32-64-1 MLP, batch 32, SGD)."""
    from overhead import tiny_mlp

    train, model, opt = tiny_mlp()

    def empty(n: int) -> None:
        for _ in range(n):
            opt.step()
            opt.zero_grad(set_to_none=True)

    def steps(n: int) -> None:
        train(REAL_STEPS if n >= SEGMENTS[1] else WARMUP_REAL_STEPS)
        opt.zero_grad(set_to_none=True)
        empty(n)

    return steps, empty, model, opt


def _install() -> None:
    """peer_table.py's child and table run this file and the ``empty`` loop."""
    pt.HERE = HERE
    pt.SEGMENTS["empty"] = SEGMENTS
    original = pt.make_loop

    def make_loop(loop: str) -> tuple[Callable[[int], None], Any]:
        if loop != "empty":
            return original(loop)
        steps, _empty, model, _opt = make_empty_loop()
        return steps, model

    pt.make_loop = make_loop


# -- native timing (no valgrind) -----------------------------------------------------------------------
def _our_hook(torch: Any) -> Any:
    """Our global step post-hook (core/wrappers.py ``step_hook``)."""
    from torch.optim.optimizer import _global_optimizer_post_hooks

    return next(h for h in _global_optimizer_post_hooks.values() if getattr(h, "__name__", "") == "step_hook")


def native_child(arm: str, steps_n: int, repeat: int) -> None:
    """Print ``{"bare": us, "arm": us, "hook": us}``: microseconds per empty step before and after the arm starts,
    and per call of the arm's step post-hook alone (called directly with the optimizer: a counted empty step)."""
    import torch  # noqa: F401  (the user's import, before the monitor's)

    if arm == "peer":
        import trainmeter.agent.core  # noqa: F401  (its sitecustomize's import)
    else:
        import trainmeter as tm

        tm.preload()
    steps, empty, model, opt = make_empty_loop()
    steps(200)

    def best_us(fn: Callable[[], None]) -> float:
        pt._settle()
        return min(timeit.repeat(fn, number=steps_n, repeat=repeat, timer=time.thread_time)) / steps_n * 1e6

    one = functools.partial(empty, 1)
    bare = best_us(one)
    if arm == "peer":
        agent = pt._peer_agent()
        steps(200)
        added = best_us(one)
        hook = best_us(functools.partial(agent._on_optimizer_step, opt, (), {}))
        agent.flush()
    else:
        root = tempfile.mkdtemp(prefix="tm-empty-step-")
        with tm.monitor(name="empty-step", run_dir=root, interval_s=3600):
            steps(200)  # the optimizer becomes the steady primary
            added = best_us(one)
            hook = best_us(functools.partial(_our_hook(torch), opt, (), {}))
    print(json.dumps({"bare": bare, "arm": added, "hook": hook}))


def native(arms: tuple[str, ...], steps_n: int, repeat: int) -> list[tuple[str, ...]]:
    rows = [("arm", "bare µs/step", "arm µs/step", "added µs/step", "arm / bare", "its step hook alone, µs/call")]
    for arm in arms:
        sock = pt._Socket() if arm == "peer" else None
        try:
            python, env = pt._env(arm, sock.path if sock else None)
            proc = subprocess.run([*python, str(HERE), "_native", "--arm", arm, "--native-steps", str(steps_n),
                                   "--native-repeat", str(repeat)], env=env, capture_output=True, text=True)
        finally:
            if sock is not None:
                sock.close()
        if proc.returncode != 0:
            rows.append((pt.LABELS[arm], "failed: " + proc.stderr[-300:].replace("\n", " "), "", "", "", ""))
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        bare, us = got["bare"], got["arm"]
        rows.append((pt.LABELS[arm], f"{bare:.2f}", f"{us:.2f}", f"{us - bare:+.2f}", f"{us / bare:.3f}",
                     f"{got['hook']:.3f}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", default="table", choices=("table", "_child", "_native"))
    ap.add_argument("--arm", action="append", choices=pt.ARMS, help=f"arms to run (default: {', '.join(ARMS)})")
    ap.add_argument("--loop", default="empty", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=2, help="valgrind processes at a time")
    ap.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--idle-thread", action=argparse.BooleanOptionalAction, default=True,
                    help="as benchmarks/peer_table.py's (default: one idle thread before the bare slope)")
    ap.add_argument("--preload", action="store_true", help="as benchmarks/peer_table.py's")
    ap.add_argument("--slow-threads", type=float, default=1.0, metavar="N", help="as benchmarks/peer_table.py's")
    ap.add_argument("--repeats", type=int, default=1, metavar="N", help="N processes per arm (callgrind)")
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind files in DIR (for callgrind_annotate)")
    ap.add_argument("--no-callgrind", action="store_true", help="only the native timing")
    ap.add_argument("--no-native", action="store_true", help="only the callgrind table")
    ap.add_argument("--native-steps", type=int, default=2000, help="empty steps per timeit run")
    ap.add_argument("--native-repeat", type=int, default=25, help="timeit runs (the best is kept)")
    args = ap.parse_args()
    _install()
    if args.what == "_child":
        return pt.child(args.arm[0], args.scale, args.idle_thread, args.preload, args.slow_threads, "empty")
    if args.what == "_native":
        return native_child(args.arm[0], args.native_steps, args.native_repeat)
    arms = tuple(args.arm or ARMS)
    if not args.no_callgrind:
        print(f"empty optimizer steps (callgrind, training thread; python {sys.version.split()[0]}; "
              f"{SEGMENTS[1]:,} and {SEGMENTS[2]:,} steps)")
        if not args.idle_thread:
            print("(no idle thread: --no-idle-thread; our arms' figures include the process's first thread)")
        if args.slow_threads != 1.0:
            print(f"(our timed threads' periods x {args.slow_threads:g} after start: --slow-threads)")
        pt.print_table(pt.table(arms, args.jobs, args.idle_thread, args.preload, args.slow_threads, args.repeats,
                                "empty", args.keep))
    if not args.no_native:
        print(f"\nempty optimizer steps natively (best of {args.native_repeat} x {args.native_steps:,} steps)")
        pt.print_table(native(tuple(a for a in arms if a in NATIVE_ARMS), args.native_steps, args.native_repeat))


if __name__ == "__main__":
    main()
