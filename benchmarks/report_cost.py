"""What start, a report and finish cost on the training thread, in Python opcodes (deterministic, seconds to run).

The quick measure beside ``peer_table.py``'s callgrind instructions (docs/spec.md section 20): the tiny loop of
benchmarks/overhead.py under ``tm.monitor()`` with every default extension, ``interval_s`` 3600 and reports
forced as peer_table forces them. ``sys.settrace`` opcode events count what runs on the training thread only
(our report worker and samplers are other threads: not counted), by function. Parts: start (entering
``tm.monitor``), the first report (after 200 steps), a later report (after 1,300 more), a second later report
(1,300 more: a report's cost must not grow with the run) and finish. Usage::

    python benchmarks/report_cost.py [--top 12] [--later-steps 1300] [--preload] [--imports]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import make_loop  # noqa: E402


def counted(fn: Callable[[], Any]) -> tuple[Any, collections.Counter[str], float]:
    """Run ``fn`` with opcode tracing on this thread; return its result, opcodes by function and CPU seconds.

    Modules ``fn`` imported (on any thread) are counted too, as ``import <module>`` entries of 0 opcodes, so
    ``--imports`` can list them.
    """
    counts: collections.Counter[str] = collections.Counter()
    before = set(sys.modules)

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_filename.split('site-packages/')[-1].split('src/')[-1]}:{code.co_name}"] += 1
        return tracer

    t0 = time.thread_time()
    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(None)
    cpu_s = time.thread_time() - t0
    IMPORTED.append(sorted(set(sys.modules) - before))
    return out, counts, cpu_s


IMPORTED: list[list[str]] = []  # the modules each counted part imported, in order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=12, help="functions listed per part")
    ap.add_argument("--later-steps", type=int, default=1300, help="steps before each later report")
    ap.add_argument("--preload", action="store_true",
                    help="run %%load_ext's preload first (trainmeter.extensions.preload), as a notebook has")
    ap.add_argument("--imports", action="store_true", help="list the modules each part imported")
    args = ap.parse_args()
    import trainmeter as tm

    if args.preload:
        from trainmeter.extensions import preload

        preload()

    steps = make_loop()
    steps(50)
    cm = tm.monitor(name="report-cost", run_dir=tempfile.mkdtemp(prefix="tm-report-cost-"), interval_s=3600)
    parts: list[tuple[str, collections.Counter[str], float]] = []
    m, counts, cpu_s = counted(cm.__enter__)
    parts.append(("start", counts, cpu_s))

    def report() -> None:
        m.steps_state.next_report_s = 0.0
        m.maybe_report()

    for label, n in (("first report", 200), ("later report", args.later_steps), ("later report 2", args.later_steps)):
        steps(n)
        _, counts, cpu_s = counted(report)
        parts.append((f"{label} (step {m.steps})", counts, cpu_s))
    _, counts, cpu_s = counted(lambda: cm.__exit__(None, None, None))
    parts.append(("finish", counts, cpu_s))
    print(f"training-thread Python opcodes (python {sys.version.split()[0]}; traced CPU seconds are not timings)")
    for (label, counts, cpu_s), imported in zip(parts, IMPORTED, strict=False):
        print(f"\n{label}: {sum(counts.values()):,} opcodes ({cpu_s:.2f} s traced), {len(imported)} modules imported")
        if args.imports and imported:
            print("  imported: " + " ".join(imported))
        for name, n in counts.most_common(args.top):
            print(f"  {n:9,d}  {name}")


if __name__ == "__main__":
    main()
