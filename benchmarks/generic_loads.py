"""Attribute loads per steady step that take CPython's generic path, bare and monitored (docs/spec.md section 20).

``python benchmarks/generic_loads.py [--arm all|core|an extension's name] [--after N]``: the tiny loop of
benchmarks/overhead.py, counted bare, then ``after`` steady steps into a monitored run (the callgrind slope's
distance from the start). One traced step (``sys.settrace`` opcode events) finds the ``LOAD_ATTR``/``LOAD_METHOD``
instructions a step runs; then ``--steps`` steps run untraced, and a load whose quickened form or miss counter
(``code._co_code_adaptive``) moved meanwhile, or that is still adaptive, took the generic path at least once
(a miss is usually every time: counted as every time).
It shows what the monitor does to the user's code outside its wrappers, e.g. a load that a change of an object's
layout keeps missing its specialization ("A dict made at the start"). CPython 3.11 only: 3.12's tracing
instruments the bytecode it would read.
"""

from __future__ import annotations

import argparse
import collections
import dis
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import build, make_loop, table  # noqa: E402

GENERIC = {"LOAD_ATTR", "LOAD_ATTR_ADAPTIVE", "LOAD_METHOD", "LOAD_METHOD_ADAPTIVE"}


def bench_generic(arm: str = "all", n_steps: int = 100, after: int = 900) -> list[tuple[str, ...]]:
    """Rows: each place whose generic loads per step differ, bare and monitored, then the totals."""
    if sys.version_info[:2] != (3, 11):
        return [("generic loads", "CPython 3.11 only")]
    names = dis._all_opname  # type: ignore[attr-defined]
    steps = make_loop()
    steps(300)

    def measure() -> collections.Counter[tuple[str, str]]:
        # one traced step finds the loads a step runs and how often (tracing runs each instruction's generic form
        # and leaves the quickened bytecode as it is); then the window runs untraced, and a load whose quickened
        # form or miss counter moved meanwhile took the generic path (adaptive, or specialized and missing)
        seen: collections.Counter[tuple[Any, int]] = collections.Counter()

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            if event == "opcode" and names[frame.f_code._co_code_adaptive[frame.f_lasti]].startswith(
                    ("LOAD_ATTR", "LOAD_METHOD")):
                seen[(frame.f_code, frame.f_lasti)] += 1
            return tracer

        sys.settrace(tracer)
        try:
            steps(1)
        finally:
            sys.settrace(None)
        before = {key: bytes(key[0]._co_code_adaptive[key[1]:key[1] + 4]) for key in seen}
        steps(n_steps)
        out: collections.Counter[tuple[str, str]] = collections.Counter()
        for (code, lasti), per_step in seen.items():
            quick = code._co_code_adaptive
            if bytes(quick[lasti:lasti + 4]) != before[(code, lasti)] or names[quick[lasti]] in GENERIC:
                where = f"{code.co_filename.split('site-packages/')[-1].split('src/')[-1]}:{code.co_name}"
                out[(where, code.co_names[quick[lasti + 1]])] += per_step
        return out

    bare = measure()
    with tempfile.TemporaryDirectory() as root:
        m = build(arm, root, interval_s=3600)
        m.start()
        steps(200)
        m.steps_state.next_report_s = 0.0  # the first report, as the callgrind arms force it
        steps(1)
        steps(after)
        monitored = measure()
        m.finish("completed")
    rows = [(f"place, attribute ({arm}, {after} steps after the start)", "generic loads per step: bare", "monitored")]
    for key in sorted(set(bare) | set(monitored), key=lambda k: bare.get(k, 0) - monitored.get(k, 0)):
        if bare.get(key, 0) != monitored.get(key, 0):
            rows.append((f"{key[0]} .{key[1]}", f"{bare.get(key, 0) :.2f}", f"{monitored.get(key, 0):.2f}"))
    rows.append(("total", f"{sum(bare.values()):.1f}", f"{sum(monitored.values()):.1f}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", default="all", help="core, all, or one extension's name (overhead.py's build)")
    ap.add_argument("--after", type=int, default=900, help="steady steps between the start and the count")
    ap.add_argument("--steps", type=int, default=100, help="steps counted")
    args = ap.parse_args()
    print(f"generic attribute loads per step, tiny loop, python {sys.version.split()[0]}")
    table(f"arm {args.arm}", bench_generic(args.arm, args.steps, args.after))


if __name__ == "__main__":
    main()
