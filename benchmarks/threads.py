"""CPU of trainmeter's own threads with the live widget, and what it costs the training thread (issue 37).

The quickstart notebook's model (a 2-layer character GPT, AdamW, an eval phase and ``tm.emit(val_loss=...)`` every
250 steps; ``torch.set_num_threads(1)``) trains under a monitor built as ``%%trainmeter`` builds it with a widget
(``text=False``, the default extensions, ``--interval`` as given), with the live widget's
:class:`~trainmeter.widget.publisher.Publisher` on its own thread writing to a real
:class:`~trainmeter.widget.widget.TrainmeterWidget` whose comm serializes every message as ipykernel would and counts
it (benchmarks/widget_bytes.py's :class:`Wire`). No browser, no kernel.

Modes:

- ``cpu`` (default): ``--seconds`` of training, monitored, then as long bare (``--pairs`` times, order alternating).
  Prints each thread's CPU in ms per second of wall time (``/proc/self/task/<tid>/schedstat``, named from
  ``threading.enumerate()``), ours summed, the training thread's CPU ms per wall second monitored and bare, and the
  publisher's bytes/s.
- ``wall``: the quickstart cell's ``--steps`` steps, bare and monitored side by side, ``--pairs`` pairs (order
  alternating): the wall seconds of each, the ratio monitored/bare per pair and its median, and the same ratio of
  the training thread's CPU seconds (less moved by other jobs on a shared machine). A side-by-side figure, not a
  timed assert.

Usage (the repository root on ``PYTHONPATH`` with ``src``)::

    python benchmarks/threads.py cpu --seconds 25 [--interval 10] [--pairs 1] [--loop gpt|mlp|paced]
    python benchmarks/threads.py wall --steps 500 --pairs 3 [--interval 5]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import _thread_cpu_s as thread_cpu_s  # noqa: E402  (CPU seconds of each thread, schedstat)

OURS = "trainmeter"  # our threads' names begin with it


def quickstart() -> Callable[[int, Callable[[], bool] | None], int]:
    """The quickstart notebook's model and cell loop: ``train(steps, stop)`` runs up to ``steps`` steps (or until
    ``stop()``, checked every 10 steps) and returns the steps run."""
    import codecs
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):
        import this

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import trainmeter as tm

    torch.manual_seed(0)
    torch.set_num_threads(1)
    text = codecs.decode(this.s, "rot13") * 20
    chars = sorted(set(text))
    V = len(chars)
    data = torch.tensor([chars.index(c) for c in text])
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    T, B, D, L = 64, 16, 64, 2

    def batch(src: Any) -> Any:
        ix = torch.randint(len(src) - T - 1, (B,))
        return torch.stack([src[i:i + T + 1] for i in ix])

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x: Any) -> Any:
            q, k, v = self.qkv(self.ln1(x)).view(x.size(0), x.size(1), 3, 4, D // 4).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def train(steps: int, stop: Callable[[], bool] | None = None) -> int:
        for step in range(1, steps + 1):
            xy = batch(train_data)
            loss = F.cross_entropy(model(xy[:, :-1]).reshape(-1, V), xy[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step % 250 == 0:
                with tm.phase("eval"), torch.no_grad():
                    model.eval()
                    xy = batch(val_data)
                    val = F.cross_entropy(model(xy[:, :-1]).reshape(-1, V), xy[:, 1:].reshape(-1))
                    model.train()
                tm.emit(val_loss=val)
            if stop is not None and step % 10 == 0 and stop():
                return step
        return steps

    return train


def mlp() -> Callable[[int, Callable[[], bool] | None], int]:
    """benchmarks/overhead.py's tiny loop (a 32-64-1 MLP, batch 32, MSELoss, SGD; thousands of steps a second), with
    the quickstart's eval phase and ``tm.emit(val_loss=...)`` every 250 steps: what scales with steps shows here."""
    import torch
    import torch.nn as nn

    import trainmeter as tm

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()
    x, y = torch.randn(32, 32), torch.randn(32, 1)

    def train(steps: int, stop: Callable[[], bool] | None = None) -> int:
        for step in range(1, steps + 1):
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step % 250 == 0:
                with tm.phase("eval"), torch.no_grad():
                    val = loss_fn(model(x), y)
                tm.emit(val_loss=val)
            if stop is not None and step % 10 == 0 and stop():
                return step
        return steps

    return train


def paced(steps_per_s: float = 10_000.0) -> Callable[[int, Callable[[], bool] | None], int]:
    """No model: one step with a loss counted as the step rule counts a captured one, every ``1 / steps_per_s``
    seconds (a busy wait), with the eval phase and ``tm.emit(val_loss=...)`` every 250 steps: the mlp loop's points
    at its unloaded rate, where a shared machine runs the mlp loop itself far slower."""
    import random

    import trainmeter as tm
    from trainmeter.core.context import active_context

    def train(steps: int, stop: Callable[[], bool] | None = None) -> int:
        run = active_context()
        count = run.steps_state.count if run is not None else (lambda tokens, loss, value: None)
        rng = random.Random(0)
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            while time.perf_counter() < t0 + step / steps_per_s:
                pass
            count(32, None, 1.0 + 0.1 * rng.random())
            if step % 250 == 0:
                with tm.phase("eval"):
                    pass
                tm.emit(val_loss=1.0 + rng.random())
            if stop is not None and step % 10 == 0 and stop():
                return step
        return steps

    return train


LOOPS = {"gpt": quickstart, "mlp": mlp, "paced": paced}


class Named:
    """Names of the threads seen (native id -> name), polled by the training loop's stop check."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def poll(self) -> None:
        for th in threading.enumerate():
            if th.native_id is not None:
                self.names[th.native_id] = th.name


def monitored(train: Callable[..., int], root: str, interval_s: float, steps: int,
              seconds: float | None) -> dict[str, Any]:
    """One monitored run with the live widget's publisher; per-thread CPU over the run (start to finish, the
    widget's close excluded)."""
    from widget_bytes import Wire, counting_comms

    from trainmeter.api import run_monitored
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.options import make_options
    from trainmeter.widget.publisher import Publisher
    from trainmeter.widget.view_model import build_state, facts_from_monitor
    from trainmeter.widget.widget import TrainmeterWidget

    t_origin = time.perf_counter()
    wire = Wire(lambda: time.perf_counter() - t_origin)
    counting_comms(wire)
    options = make_options(name="threads", run_dir=root, interval_s=interval_s)
    m = make_monitor(options, text=False, extensions=default_extensions(options), out=io.StringIO())
    named = Named()
    main_tid = threading.main_thread().native_id
    before = thread_cpu_s()
    t0 = time.perf_counter()
    widget = TrainmeterWidget(state=build_state(facts_from_monitor(m.context)))
    pub = Publisher(m.context, widget)
    widget.attach(pub)
    pub.start()
    deadline = None if seconds is None else t0 + seconds

    steady_from = t0 + interval_s + 2.0  # past the first report and its one-time work (the FLOP count pass)
    steady: dict[str, Any] = {}

    def stop() -> bool:
        named.poll()
        now = time.perf_counter()
        if not steady and now >= steady_from:
            steady.update(t=now, cpu=thread_cpu_s())
        return deadline is not None and now >= deadline

    with run_monitored(m):
        done = train(steps, stop)
        named.poll()
        after = thread_cpu_s()
        t1 = time.perf_counter()
        wall_s = t1 - t0
    pub.close()
    widget.close()  # its comm closes now, not in __del__ at the interpreter's exit
    time.sleep(0.2)
    held = sorted(th.name for th in threading.enumerate() if th.name.startswith(OURS) and th.is_alive())
    if steady:
        steady = {"wall_s": t1 - steady["t"], "cpu": {tid: cpu - steady["cpu"].get(tid, 0.0) for tid, cpu in after.items()}}
    live_bytes = sum(n for _, k, n in wire.log if k != "open")
    return {"wall_s": wall_s, "steps": done, "main_tid": main_tid, "names": named.names, "bytes": live_bytes,
            "cpu": {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}, "steady": steady, "held": held}


def bare(train: Callable[..., int], steps: int, seconds: float | None) -> dict[str, Any]:
    """The same loop unmonitored: its wall seconds and the training thread's CPU seconds."""
    main_tid = threading.main_thread().native_id
    deadline = None if seconds is None else time.perf_counter() + seconds
    before = thread_cpu_s().get(main_tid, 0.0)
    t0 = time.perf_counter()
    done = train(steps, (lambda: time.perf_counter() >= deadline) if deadline is not None else None)
    wall_s = time.perf_counter() - t0
    return {"wall_s": wall_s, "steps": done, "main_cpu_s": thread_cpu_s().get(main_tid, 0.0) - before}


def cpu_mode(seconds: float, interval_s: float, pairs: int, loop: str) -> None:
    train = LOOPS[loop]()
    train(50)  # warm: first-call costs out of the figures
    parts = ("whole", "steady")
    rows: dict[str, dict[str, list[float]]] = {p: {} for p in parts}
    main_mon: dict[str, list[float]] = {p: [] for p in parts}
    ours_total: dict[str, list[float]] = {p: [] for p in parts}
    main_bare: list[float] = []
    bytes_s: list[float] = []
    held: set[str] = set()
    for i in range(pairs):
        with tempfile.TemporaryDirectory() as root:
            arms = ("monitored", "bare") if i % 2 == 0 else ("bare", "monitored")
            for arm in arms:
                if arm == "bare":
                    b = bare(train, 10**9, seconds)
                    main_bare.append(1000 * b["main_cpu_s"] / b["wall_s"])
                    continue
                r = monitored(train, root, interval_s, 10**9, seconds)
                bytes_s.append(r["bytes"] / r["wall_s"])
                held.update(r["held"])
                print(f"  run {i + 1}: monitored {r['wall_s']:.1f} s, {r['steps']} steps", file=sys.stderr)
                for part, got in (("whole", r), ("steady", r["steady"])):
                    if not got:
                        continue
                    total = 0.0
                    for tid, used in got["cpu"].items():
                        per_s = 1000 * used / got["wall_s"]
                        if tid == r["main_tid"]:
                            main_mon[part].append(per_s)
                            continue
                        name = r["names"].get(tid, f"tid {tid} (other)")
                        if used <= 0:
                            continue
                        rows[part].setdefault(name, []).append(per_s)
                        if name.startswith(OURS):
                            total += per_s
                    ours_total[part].append(total)

    def cell(vals: list[float], fmt: str = ".2f") -> str:
        return f"{statistics.median(vals):7{fmt}} [{' '.join(format(v, fmt) for v in vals)}]" if vals else "-"

    print(f"threads' CPU, ms per wall second ({loop} loop, widget publisher attached, --interval {interval_s:g}, "
          f"{seconds:g} s runs, {pairs} run(s); median [each run]); whole: the run from its start; steady: from 2 s "
          "after the first report (its one-time work done) to the end")
    names = sorted(set(rows["whole"]) | set(rows["steady"]), key=lambda n: -statistics.median(rows["whole"].get(n, [0])))
    print(f"  {'thread':<32} {'whole':>24}   {'steady':>24}")
    for name in names:
        print(f"  {name:<32} {cell(rows['whole'].get(name, [])):>24}   {cell(rows['steady'].get(name, [])):>24}")
    print(f"  {'ours together (trainmeter-*)':<32} {cell(ours_total['whole']):>24}   {cell(ours_total['steady']):>24}")
    print(f"  {'training thread, monitored':<32} {cell(main_mon['whole'], '.0f'):>24}   "
          f"{cell(main_mon['steady'], '.0f'):>24}")
    print(f"  {'training thread, bare':<32} {cell(main_bare, '.0f'):>24}")
    print(f"  widget bytes/s on the wire: {statistics.median(bytes_s):,.0f}")
    print(f"  our threads alive 0.2 s after the run and the widget's close: {', '.join(sorted(held)) or 'none'}")


def wall_mode(steps: int, interval_s: float, pairs: int, loop: str) -> None:
    train = LOOPS[loop]()
    train(50)
    ratios, cpu_ratios = [], []
    for i in range(pairs):
        with tempfile.TemporaryDirectory() as root:
            runs = {}
            for arm in (("bare", "monitored") if i % 2 == 0 else ("monitored", "bare")):
                if arm == "bare":
                    b = bare(train, steps, None)
                    runs[arm] = (b["wall_s"], b["main_cpu_s"])
                else:
                    r = monitored(train, root, interval_s, steps, None)
                    runs[arm] = (r["wall_s"], r["cpu"].get(r["main_tid"], 0.0))
        (b, b_cpu), (mon, mon_cpu) = runs["bare"], runs["monitored"]
        ratios.append(mon / b)
        cpu_ratios.append(mon_cpu / b_cpu)
        print(f"  pair {i + 1}: bare {b:.2f} s ({b_cpu:.2f} s CPU), monitored {mon:.2f} s ({mon_cpu:.2f} s CPU), "
              f"wall ratio {mon / b:.3f}, training thread's CPU ratio {mon_cpu / b_cpu:.3f}")
    print(f"{loop} loop, {steps} steps, --interval {interval_s:g}: wall ratio monitored/bare median "
          f"{statistics.median(ratios):.3f} [{' '.join(f'{r:.3f}' for r in ratios)}]; the training thread's CPU "
          f"ratio median {statistics.median(cpu_ratios):.3f} [{' '.join(f'{r:.3f}' for r in cpu_ratios)}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--seconds", type=float, default=25.0, help="cpu: seconds of each run")
    parser.add_argument("--steps", type=int, default=500, help="wall: steps of each run")
    parser.add_argument("--interval", type=float, default=None,
                        help="the run's --interval (default: 10 for cpu, the options' default; 5 for wall, "
                             "the quickstart's)")
    parser.add_argument("--loop", choices=tuple(LOOPS), default="gpt",
                        help="gpt: the quickstart's model (default); mlp: a tiny loop of thousands of steps a second; "
                             "paced: no model, 10k steps a second (the mlp loop's points whatever the machine's load)")
    parser.add_argument("--pairs", type=int, default=None, help="runs of each arm (default: cpu 1, wall 3)")
    args = parser.parse_args()
    if args.mode == "cpu":
        cpu_mode(args.seconds, args.interval or 10.0, args.pairs or 1, args.loop)
    else:
        wall_mode(args.steps, args.interval or 5.0, args.pairs or 3, args.loop)
    import ipywidgets

    ipywidgets.Widget.close_all()  # their comms close now, not in __del__ at the interpreter's exit


if __name__ == "__main__":
    main()
