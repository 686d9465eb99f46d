"""``tm.compare`` on 20 saved runs of 1M steps each: Python time and bytes sent to the browser.

Setup (not timed): one synthetic 1,000,000-step run is fed through the real curves
accumulator (a train loss every step, a val loss every 1,000 steps, a report every 1,000
steps), and 20 run folders get its ``curves.json`` (losses scaled per run) and a passport.
Timed: ``compare(root=..., last=20)`` building every figure and the table, as process
(CPU) time and wall time, best of ``--repeat``. Bytes: the JSON state plus binary buffers
of every widget in the returned tree, i.e. what the kernel sends when it is displayed.

With ``--cold`` it also times one run read from a 1M-step ``events.jsonl`` (no ``curves.json``:
an old or killed run), the first-time cost before the cache is written.

Targets: < 1 s of Python time and < 2 MB to the browser for 20 runs.
Usage: ``python benchmarks/compare.py [--runs 20] [--steps 1000000] [--repeat 3] [--cold]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "src", REPO):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from trainmeter.comparison.extension import Curves, write_curves  # noqa: E402
from trainmeter.comparison.figures import compare  # noqa: E402

CHUNK = 1_000


def synthetic_curves(steps: int) -> dict[str, Any]:
    c = Curves()
    tokens = 0
    for start in range(0, steps, CHUNK):
        xs = list(range(start + 1, start + CHUNK + 1))
        c.add_series("train_loss", xs, [2.0 + math.exp(-s / 2e5) + 0.05 * math.sin(s) for s in xs])
        c.add_series("val_loss", [xs[-1]], [2.1 + math.exp(-xs[-1] / 2e5)])
        tokens += CHUNK * 4096
        c.add_report(step=xs[-1], tokens=tokens, elapsed_s=xs[-1] * 0.25, tokens_per_s=16384.0 + (start % 7),
                     mfu={"megatron": 0.41})
    return c.to_dict()


def passport(i: int, steps: int) -> dict[str, Any]:
    return {"schema_version": 1, "name": f"run{i:02d}", "status": "completed", "steps": steps,
            "tokens": steps * 4096, "token_unit": "tokens", "elapsed_s": steps * 0.25, "goodput": 0.93,
            "throughput": {"train_tokens_per_s": 16384.0}, "series": {"train_loss": {"last": 2.0, "min": 1.99}},
            "options": {"name": f"run{i:02d}", "convention": "megatron", "interval_s": 10.0},
            "environment": {"torch": "2.9.0" if i % 2 else "2.8.0", "python": "3.11.9"},
            "compute": {"convention": "megatron", "flops_per_token": {"megatron": 6.0e9},
                        "mfu": {"megatron": 0.41}},
            "energy": {"j_per_token": 0.0021}}


def scaled(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for s in out["series"].values():
        s["value"] = [v * factor for v in s["value"]]
    return out


def widget_bytes(root: Any) -> int:
    """JSON state + binary buffers of every widget reachable from ``root``."""
    from ipywidgets import Widget
    from ipywidgets.widgets.widget import _remove_buffers

    seen: set[str] = set()
    total = 0
    todo = [root]
    while todo:
        w = todo.pop()
        if not isinstance(w, Widget) or w.model_id in seen:
            continue
        seen.add(w.model_id)
        state, _, buffers = _remove_buffers(w.get_state())
        total += len(json.dumps(state, default=str)) + sum(len(memoryview(b).cast("B")) for b in buffers)
        for name in w.keys:
            value = getattr(w, name)
            items = value if isinstance(value, (list, tuple)) else (
                list(value.values()) if isinstance(value, dict) else [value])
            todo.extend(v for v in items if isinstance(v, Widget))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        t0 = time.perf_counter()
        doc = synthetic_curves(args.steps)
        for i in range(args.runs):
            d = root / f"20260101T0000{i:02d}Z-run{i:02d}"
            d.mkdir(parents=True)
            (d / "passport.json").write_text(json.dumps(passport(i, args.steps)))
            (d / "events.jsonl").write_text("")
            write_curves(d, scaled(doc, 1 + i / 100))
        print(f"setup: {args.runs} runs of {args.steps:,} steps in {time.perf_counter() - t0:.1f} s "
              f"(curves.json {(root / next(p.name for p in root.iterdir()) / 'curves.json').stat().st_size:,} bytes each)")
        compare(root=root, last=args.runs)  # import bqplot once, outside the timing
        best_cpu = best_wall = math.inf
        box = None
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            box = compare(root=root, last=args.runs)
            best_cpu = min(best_cpu, time.process_time() - c0)
            best_wall = min(best_wall, time.perf_counter() - w0)
        sent = widget_bytes(box)
        points = sum(len(line.x) for lines in box.lines.values() for line in lines)
        print(f"compare({args.runs} runs, 4 figures): {best_cpu:.3f} s CPU, {best_wall:.3f} s wall (best of "
              f"{args.repeat}); {points:,} points drawn; {sent / 1e6:.2f} MB to the browser")
        print(f"targets: < 1 s Python time: {'met' if best_cpu < 1 else 'NOT met'}; "
              f"< 2 MB: {'met' if sent < 2e6 else 'NOT met'}")
        if args.cold:
            cold_run(Path(tmp), args.steps)


def cold_run(tmp: Path, steps: int) -> None:
    """One run read from a full events.jsonl (what a run without curves.json costs the first time)."""
    d = tmp / "cold" / "20260101T000000Z-old"
    d.mkdir(parents=True)
    with (d / "events.jsonl").open("w") as f:
        for start in range(0, steps, CHUNK):
            xs = list(range(start + 1, start + CHUNK + 1))
            t_us = [s * 250_000 for s in xs]
            f.write(json.dumps({"schema_version": 1, "kind": "steps", "name": "tokens_per_step", "x": "step",
                                "step": xs, "t_us": t_us, "value": [4096] * CHUNK}, separators=(",", ":")) + "\n")
            f.write(json.dumps({"schema_version": 1, "kind": "series", "name": "train_loss", "x": "step",
                                "step": xs, "t_us": t_us, "value": [2.0 + 1 / s for s in xs]},
                               separators=(",", ":")) + "\n")
            f.write(json.dumps({"schema_version": 1, "kind": "interval", "step": xs[-1], "tokens": xs[-1] * 4096,
                                "elapsed_s": xs[-1] * 0.25, "throughput": {"train_tokens_per_s": 16384.0}},
                               separators=(",", ":")) + "\n")
    (d / "passport.json").write_text(json.dumps(passport(0, steps)))
    size = (d / "events.jsonl").stat().st_size
    c0, w0 = time.process_time(), time.perf_counter()
    compare(d, y=("train_loss",))
    cold = time.process_time() - c0, time.perf_counter() - w0
    c0 = time.process_time()
    compare(d, y=("train_loss",))
    warm = time.process_time() - c0
    print(f"cold: one run from a {size / 1e6:.0f} MB events.jsonl: {cold[0]:.2f} s CPU ({cold[1]:.2f} s wall); "
          f"then from its cached curves.json: {warm:.3f} s CPU")


if __name__ == "__main__":
    main()
