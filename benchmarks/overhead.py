"""What a monitored run really pays, end to end.

The loop is the issue's tiny CPU loop: a 32-64-1 MLP, batch 32, MSE loss, SGD,
one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``), ~220 us and
~880k instructions per step. Five measurements, each printed as a table:

a. ``wall``: end-to-end added wall time per step in steady state, as paired
   alternations in one process. A round is: bare ``--block`` steps, then the
   arm (start a run, ``--warmup`` steps inside it, ``--block`` measured steps,
   finish), then bare ``--block`` steps; added = arm - mean(bare before, bare
   after). Arms: ``control`` (bare/bare: the same round with no monitor; its
   spread is the noise floor), ``core`` (no extensions) and ``all`` (the
   default extensions). Rounds interleave the arms in a shuffled order;
   medians of the paired differences are printed.
b. ``callgrind``: instructions per step under valgrind callgrind (training
   thread only, ``--separate-threads=yes``), as the slope between step 200 and
   step 200 + ``--cg-steps``, for bare, the core alone, each extension alone
   and all together, in one valgrind process. Also the start-up instructions
   of each (the first start in the process is "cold": it pays the imports).
   Reports are kept out of the slope (``interval_s`` 3600: under valgrind the
   wall clock is ~50x slow, so reports would fall ~50x too often per step);
   one report's instructions are printed separately.
c. ``start``: the training thread's cost of entering ``tm.monitor`` (wall and
   ``time.thread_time``), cold (first run in a fresh process) and warm.
d. ``window``: the slowdown window after start: per-step times right after
   ``tm.monitor`` is entered against the bare median measured just before;
   the window ends at the last 50-step rolling median above 1.1x bare.
g. ``ops``: Python bytecode instructions per steady step, by function, counted with
   ``sys.settrace`` opcode events over 100 steps, monitored (core alone) minus bare:
   deterministic, and says which function the added cost belongs to.
f. ``gpt``: process-level paired runs on a tiny GPT (2 layers, d_model 128, 4 x 64
   tokens, ~15 ms/step on one CPU thread; on CUDA when a GPU is there): each round runs
   a fresh process per arm (``bare``, ``monitored``, and a second ``bare`` as the
   control) in a shuffled order, each timing ``--gpt-steps`` steps after 20 warm-up
   steps; printed: per-arm median ms/step and the median of the paired differences
   (monitored - bare, and the control bare - bare), with their spread.
e. ``threads``: CPU seconds of each thread of the process over a real run of
   ``--threads-s`` seconds, from ``/proc/self/task/<tid>/schedstat``.

Timings on a shared machine are noisy: paired medians and instruction counts
are the signal, single timings are not. Usage::

    python benchmarks/overhead.py [all|wall|callgrind|start|window|threads] [--rounds 30] ...
    python benchmarks/overhead.py peer-table   # side by side with the peer, the minimal monitor, the floor

``peer-table`` (benchmarks/peer_table.py) is not in ``all``: six valgrind processes, minutes each.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve()
EXTENSIONS = ("compute", "gpu", "time", "node", "taps")
MARK = os.getppid  # callgrind dumps before each call (--dump-before=getppid)


def child_env() -> dict[str, str]:
    """Environment for child processes: one thread, and compiled bytecode cached as an installed package has it
    (``PYTHONDONTWRITEBYTECODE`` would make every cold start compile trainmeter's sources)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "trainmeter-bench-pycache"))
    return env


# -- the loop ----------------------------------------------------------------------------
def make_loop() -> Callable[[int], None]:
    """The tiny loop; returns ``steps(n)`` that trains ``n`` steps."""
    return make_loop_and_model()[0]


def make_loop_and_model() -> tuple[Callable[[int], None], Any]:
    """The tiny loop's ``steps(n)`` and the model it trains (a monitor given ``model=``)."""
    steps, model, _opt = tiny_mlp()
    return steps, model


def tiny_mlp() -> tuple[Callable[[int], None], Any, Any]:
    """The tiny loop's ``steps(n)``, its model and its optimizer (a 32-64-1 MLP, batch 32, SGD)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(32, 32), torch.randn(32, 1)
    mse = F.mse_loss

    def steps(n: int) -> None:
        for _ in range(n):
            loss = mse(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return steps, model, opt


def timed(steps: Callable[[int], None], n: int) -> float:
    """Seconds per step over ``n`` steps."""
    t0 = time.perf_counter()
    steps(n)
    return (time.perf_counter() - t0) / n


def per_step_times(steps: Callable[[int], None], n: int) -> list[float]:
    """Wall seconds of each of ``n`` steps."""
    out = []
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        steps(1)
        out.append(clock() - t0)
    return out


def build(arm: str, root: str, interval_s: float | None = None) -> Any:
    """An unstarted monitor for ``arm``: ``core``, one extension's name, or ``all``."""
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.options import make_options

    options = make_options(name=f"bench-{arm}", run_dir=root, interval_s=interval_s, widget=False)
    exts = default_extensions(options)
    if arm == "core":
        exts = []
    elif arm != "all":
        exts = [e for e in exts if e.name == arm]
        assert exts, arm
    return make_monitor(options, extensions=exts, out=io.StringIO())


# -- a. wall, paired ------------------------------------------------------------------------
def bench_wall(rounds: int, block: int, warmup: int, arms: tuple[str, ...]) -> list[tuple[str, ...]]:
    steps = make_loop()
    steps(2000)
    added: dict[str, list[float]] = {arm: [] for arm in arms}
    base: dict[str, list[float]] = {arm: [] for arm in arms}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as root:
        for _ in range(rounds):
            order = list(arms)
            rng.shuffle(order)
            for arm in order:
                before = timed(steps, block)
                if arm == "control":
                    steps(warmup)
                    during = timed(steps, block)
                else:
                    m = build(arm, root).start()
                    steps(warmup)
                    during = timed(steps, block)
                    m.finish("completed")
                    assert m.steps == warmup + block, (arm, m.steps)  # not one step lost
                after = timed(steps, block)
                bare = (before + after) / 2
                added[arm].append(during - bare)
                base[arm].append(bare)
    rows = [("arm", "bare us/step", "added us/step (median)", "IQR", "ratio")]
    for arm in arms:
        d = sorted(added[arm])
        q1, q3 = d[len(d) // 4], d[(3 * len(d)) // 4]
        b = statistics.median(base[arm])
        med = statistics.median(d)
        rows.append((arm, f"{b * 1e6:.1f}", f"{med * 1e6:+.2f}", f"[{q1 * 1e6:+.1f}, {q3 * 1e6:+.1f}]",
                     f"{(b + med) / b:.4f}"))
    return rows


# -- b. callgrind ------------------------------------------------------------------------------
CG_ARMS = ("all", "core", *EXTENSIONS, "all-warm")


def cg_child(cg_steps: int) -> None:
    """Runs under valgrind: every segment ends with a MARK (a callgrind dump)."""
    import trainmeter  # noqa: F401  (the user's import, before the loop)

    steps = make_loop()
    steps(50)
    MARK()  # 1: imports and set-up (ignored)
    steps(200)
    MARK()  # 2: bare, steps 1-200 (ignored)
    steps(cg_steps)
    MARK()  # 3: bare slope
    with tempfile.TemporaryDirectory() as root:
        for arm in CG_ARMS:
            m = build(arm.removesuffix("-warm"), root, interval_s=3600)
            MARK()  # build (ignored: counted in start below)
            m.start()
            MARK()  # start
            steps(200)
            MARK()  # first 200 steps
            steps(cg_steps)
            MARK()  # slope
            m.maybe_report()
            MARK()  # one report
            assert m.steps == 200 + cg_steps, (arm, m.steps)
            m.finish("completed")
            MARK()  # finish


def cg_parts(pattern: str) -> tuple[dict[int, int], dict[int, int]]:
    """Instructions of the training thread per part, and of other threads over the whole run, from the callgrind
    files matching ``pattern`` (``--separate-threads=yes``: one file per thread and part)."""
    main: dict[int, int] = {}
    others: dict[int, int] = {}
    for path in glob.glob(pattern):
        part = thread = summary = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("part:"):
                    part = int(line.split()[1])
                elif line.startswith("thread:"):
                    thread = int(line.split()[1])
                elif line.startswith("summary:"):
                    summary = int(line.split()[1])
                    break
        if thread == 1:
            main[part or 0] = summary or 0
        elif thread is not None:
            others[thread] = others.get(thread, 0) + (summary or 0)
    return main, others


def bench_callgrind(cg_steps: int) -> list[tuple[str, ...]]:
    if shutil.which("valgrind") is None:
        return [("callgrind", "valgrind not found (apt-get install -y valgrind)")]
    out_dir = tempfile.mkdtemp(prefix="tm-cg-")
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--fair-sched=yes", "--dump-instr=no",
           "--dump-before=getppid", f"--callgrind-out-file={out_dir}/cg.%p", sys.executable, str(HERE), "_cg-child",
           "--cg-steps", str(cg_steps)]
    subprocess.run([sys.executable, str(HERE), "_start-child"], env=child_env(), capture_output=True)  # bytecode
    # a fixed hash seed: dict and set layouts (and so the instruction counts) repeat from run to run
    # (two runs of the same tree gave the same count to the instruction; with random seeds they differ by ~1-3k)
    proc = subprocess.run(cmd, env=dict(child_env(), PYTHONHASHSEED="0"), capture_output=True, text=True)
    if proc.returncode != 0:
        return [("callgrind", f"failed: {proc.stderr[-2000:]}")]
    pid = int(next(Path(out_dir).glob("cg.*")).name.split(".")[1].split("-")[0])
    parts, others = cg_parts(f"{out_dir}/cg.{pid}*")
    shutil.rmtree(out_dir, ignore_errors=True)
    seq = [parts.get(i, 0) for i in range(1, max(parts) + 1)]
    bare = seq[2] / cg_steps
    rows = [("arm", "instr/step", "added/step", "added %", "start instr", "first 200 steps' excess", "report instr",
             "finish instr")]
    rows.append(("bare", f"{bare / 1e3:.1f}k", "", "", "", "", "", ""))
    for i, arm in enumerate(CG_ARMS):
        build_, start, first, slope, report, finish = seq[3 + 6 * i: 3 + 6 * i + 6]
        per = slope / cg_steps
        name = "all (cold: first start pays imports)" if arm == "all" else arm
        rows.append((name, f"{per / 1e3:.1f}k", f"{(per - bare) / 1e3:+.2f}k", f"{(per - bare) / bare * 100:+.2f}%",
                     f"{(build_ + start) / 1e6:.1f}M", f"{(first - 200 * per) / 1e6:+.2f}M", f"{report / 1e6:.2f}M",
                     f"{finish / 1e6:.1f}M"))
    rows.append(("other threads, whole process", f"{sum(others.values()) / 1e6:.1f}M instr", "", "", "", "", "", ""))
    return rows


# -- c. start ------------------------------------------------------------------------------------
def start_child() -> None:
    """Prints cold and warm start costs of ``tm.monitor`` (fresh process)."""
    import trainmeter as tm

    steps = make_loop()
    steps(200)
    with tempfile.TemporaryDirectory() as root:
        for label in ("cold", "warm", "warm"):
            w0, c0 = time.perf_counter(), time.thread_time()
            cm = tm.monitor(name="bench", run_dir=root)
            m = cm.__enter__()
            w1, c1 = time.perf_counter(), time.thread_time()
            steps(20)
            cm.__exit__(None, None, None)
            assert m.steps == 20
            print(f"{label} {(w1 - w0) * 1e3:.2f} {(c1 - c0) * 1e3:.2f}", flush=True)


def bench_start(repeats: int) -> list[tuple[str, ...]]:
    cold_w, cold_c, warm_w, warm_c = [], [], [], []
    subprocess.run([sys.executable, str(HERE), "_start-child"], env=child_env(), capture_output=True)  # bytecode
    for _ in range(repeats):
        out = subprocess.run([sys.executable, str(HERE), "_start-child"], env=child_env(), capture_output=True,
                             text=True, check=True).stdout.split("\n")
        for line in out:
            if not line.strip() or line.split()[0] not in ("cold", "warm"):
                continue
            label, w, c = line.split()
            (cold_w if label == "cold" else warm_w).append(float(w))
            (cold_c if label == "cold" else warm_c).append(float(c))
    return [("start of tm.monitor (all extensions)", "wall ms (median)", "training-thread CPU ms (median)"),
            (f"cold (first run in a process), n={len(cold_w)}", f"{statistics.median(cold_w):.1f}",
             f"{statistics.median(cold_c):.1f}"),
            (f"warm (later runs), n={len(warm_w)}", f"{statistics.median(warm_w):.1f}",
             f"{statistics.median(warm_c):.1f}")]


# -- d. slowdown window ------------------------------------------------------------------------
def _window(times: list[float], bare: float) -> tuple[float, float, float, float]:
    """Last time (s) a 50-step rolling median exceeds 1.1x ``bare``; mean step in the first 0.1 s, in 0.1-1 s
    (after the first 0.1 s: what a window longer than 0.1 s would show) and in the first 1 s."""
    ends, t = [], 0.0
    for dt in times:
        t += dt
        ends.append(t)
    win, last_slow_s = 50, 0.0
    for i in range(win, len(times) + 1):
        if statistics.median(times[i - win:i]) > 1.1 * bare:
            last_slow_s = ends[i - 1]
    first_100ms = [dt for dt, e in zip(times, ends, strict=False) if e <= 0.1] or times[:1]
    first_1s = [dt for dt, e in zip(times, ends, strict=False) if e <= 1.0]
    after_100ms = [dt for dt, e in zip(times, ends, strict=False) if 0.1 < e <= 1.0] or first_1s
    return last_slow_s, statistics.mean(first_100ms), statistics.mean(after_100ms), statistics.mean(first_1s)


def window_child(seconds: float) -> None:
    """Prints ``RESULT arm bare window first100ms first1s`` for a control (bare) arm and the monitored arm."""
    import trainmeter as tm

    steps = make_loop()
    steps(2000)
    with tempfile.TemporaryDirectory() as root:
        for arm in ("control", "all"):
            bare = statistics.median(per_step_times(steps, 2000))
            n = int(seconds / bare)
            if arm == "control":
                times = per_step_times(steps, n)
            else:
                with tm.monitor(name="bench", run_dir=root):
                    times = per_step_times(steps, n)
            w, f100, a100, f1 = _window(times, bare)
            print(f"RESULT {arm} {bare * 1e6:.1f} {w:.3f} {f100 * 1e6:.1f} {a100 * 1e6:.1f} {f1 * 1e6:.1f}", flush=True)


def bench_window(repeats: int, seconds: float) -> list[tuple[str, ...]]:
    rows = [("fresh process", "arm", "bare us/step", "window s (last 50-step median > 1.1x bare)",
             "mean us/step, first 0.1 s", "mean us/step, 0.1-1 s", "mean us/step, first 1 s")]
    for i in range(repeats):
        out = subprocess.run([sys.executable, str(HERE), "_window-child", "--window-s", str(seconds)],
                             env=child_env(), capture_output=True, text=True, check=True).stdout.splitlines()
        for line in out:
            if line.startswith("RESULT "):
                rows.append((str(i + 1), *line.split()[1:]))
    for arm in ("control", "all"):  # medians over the fresh processes
        mine = [r for r in rows[1:] if r[1] == arm]
        if mine:
            rows.append(("median", arm, *(f"{statistics.median(float(r[k]) for r in mine):.1f}" for k in range(2, 7))))
    return rows


# -- e. background threads ------------------------------------------------------------------------
def _thread_cpu_s() -> dict[int, float]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError):
            continue
    return out


def bench_threads(seconds: float) -> list[tuple[str, ...]]:
    import trainmeter as tm

    steps = make_loop()
    steps(500)
    with tempfile.TemporaryDirectory() as root:
        before = _thread_cpu_s()
        t0 = time.perf_counter()
        with tm.monitor(name="bench", run_dir=root) as m:
            names = {}
            deadline = t0 + seconds
            while time.perf_counter() < deadline:
                steps(200)
                for th in threading.enumerate():
                    if th.native_id is not None:
                        names[th.native_id] = th.name
            after = _thread_cpu_s()
        wall = time.perf_counter() - t0
    main_tid = threading.main_thread().native_id
    rows = [(f"thread ({wall:.1f} s run, {m.steps} steps)", "CPU s", "% of one core")]
    for tid, cpu in sorted(after.items(), key=lambda kv: -(kv[1] - before.get(kv[0], 0.0))):
        used = cpu - before.get(tid, 0.0)
        if used <= 0 and tid != main_tid:
            continue
        name = "training (main)" if tid == main_tid else names.get(tid, f"native tid {tid} (torch/other)")
        rows.append((name, f"{used:.3f}", f"{used / wall * 100:.2f}%"))
    return rows


# -- g. opcodes per step --------------------------------------------------------------------------------
def bench_ops(arm: str = "core", n_steps: int = 100) -> list[tuple[str, ...]]:
    import collections

    steps = make_loop()
    steps(50)
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            where = code.co_filename.split("site-packages/")[-1].split("src/")[-1]
            counts[f"{where}:{code.co_name}"] += 1
        return tracer

    def measure() -> dict[str, int]:
        counts.clear()
        sys.settrace(tracer)
        try:
            steps(n_steps)
        finally:
            sys.settrace(None)
        return dict(counts)

    bare = measure()
    with tempfile.TemporaryDirectory() as root:
        m = build(arm, root, interval_s=3600)
        m.start()
        steps(300)
        m.steps_state.next_report_s = 0.0  # a report, as the callgrind arms force one: the wings' strides are set
        steps(1)
        steps(300)  # past the sampled wings' next reads
        monitored = measure()
        m.finish("completed")
    rows = [(f"function ({arm}, {n_steps} steps)", "added opcodes per step")]
    diff = {k: (monitored.get(k, 0) - bare.get(k, 0)) / n_steps for k in set(bare) | set(monitored)}
    for name, per in sorted(diff.items(), key=lambda kv: -kv[1]):
        if abs(per) >= 0.5:
            rows.append((name, f"{per:+.1f}"))
    rows.append(("total", f"{sum(diff.values()):+.1f} (bare {sum(bare.values()) / n_steps:.0f} per step)"))
    return rows


# -- f. tiny GPT, process level --------------------------------------------------------------------------
def tiny_gpt(vocab: int, seq: int, width: int) -> Any:
    """A 2-block causal transformer (4 heads, pre-norm, no dropout) over ``vocab`` tokens, ``seq`` positions and
    ``width`` channels, called positionally with token ids (also benchmarks/peer_table.py's gpt loop)."""
    import torch
    import torch.nn as nn

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.pos = nn.Parameter(torch.zeros(seq, width))
            layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.head(self.blocks(self.embed(idx) + self.pos, mask=self.mask, is_causal=True))

    return TinyGPT()


def gpt_child(arm: str, n_steps: int) -> None:
    """Prints ``RESULT <seconds per step>`` for ``n_steps`` timed steps of the tiny GPT (fresh process)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    vocab, seq, width, batch = 512, 64, 128, 4

    model = tiny_gpt(vocab, seq, width).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (batch, seq + 1), device=device)
    x, y = data[:, :-1], data[:, 1:]

    def steps(n: int) -> None:
        for _ in range(n):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def timed_steps() -> float:
        steps(20)
        sync()
        t0 = time.perf_counter()
        steps(n_steps)
        sync()
        return (time.perf_counter() - t0) / n_steps

    if arm == "monitored":
        import trainmeter as tm

        with tempfile.TemporaryDirectory() as root, tm.monitor(name="bench-gpt", run_dir=root, widget=False):
            per = timed_steps()
    else:
        per = timed_steps()
    print(f"RESULT {per:.6f} {device}", flush=True)


def bench_gpt(rounds: int, n_steps: int) -> list[tuple[str, ...]]:
    arms = ("bare", "monitored", "bare-control")
    times: dict[str, list[float]] = {a: [] for a in arms}
    device = "?"
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            out = subprocess.run([sys.executable, str(HERE), "_gpt-child", "--gpt-arm", arm.split("-")[0],
                                  "--gpt-steps", str(n_steps)], env=child_env(), capture_output=True, text=True,
                                 check=True).stdout.split()
            i = out.index("RESULT")
            times[arm].append(float(out[i + 1]))
            device = out[i + 2]
    diff = [m - b for m, b in zip(times["monitored"], times["bare"], strict=True)]
    ctrl = [c - b for c, b in zip(times["bare-control"], times["bare"], strict=True)]
    bare = statistics.median(times["bare"])
    rows = [(f"tiny GPT on {device}, {rounds} rounds x {n_steps} steps", "median ms/step", "paired diff ms/step",
             "diff % of bare", "diff range ms/step")]
    rows.append(("bare", f"{bare * 1e3:.3f}", "", "", ""))
    for name, d in (("monitored - bare", diff), ("control: bare - bare", ctrl)):
        rows.append((name, "", f"{statistics.median(d) * 1e3:+.3f}", f"{statistics.median(d) / bare * 100:+.2f}%",
                     f"{min(d) * 1e3:+.3f} .. {max(d) * 1e3:+.3f}"))
    rows.append(("verdict", "no measurable difference" if abs(statistics.median(diff)) <= max(abs(x) for x in ctrl)
                 else "monitored differs by more than the control arm's largest swing", "", "", ""))
    return rows


# -- output ------------------------------------------------------------------------------------------
def table(title: str, rows: list[tuple[str, ...]]) -> None:
    print(f"\n{title}")
    widths = [max(len(str(r[i])) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    for r in rows:
        print("  " + "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", default="all",
                    choices=("all", "wall", "callgrind", "start", "window", "threads",
                             "gpt", "ops", "peer-table", "_cg-child", "_start-child", "_window-child", "_gpt-child"))
    ap.add_argument("--rounds", type=int, default=30, help="wall: rounds per arm")
    ap.add_argument("--block", type=int, default=300, help="wall: measured steps per block")
    ap.add_argument("--warmup", type=int, default=1500, help="wall: steps inside the run before measuring")
    ap.add_argument("--cg-steps", type=int, default=1000, help="callgrind: steps in the slope")
    ap.add_argument("--repeats", type=int, default=5, help="start/window: fresh processes")
    ap.add_argument("--window-s", type=float, default=2.0, help="window: seconds of steps after start")
    ap.add_argument("--threads-s", type=float, default=30.0, help="threads: seconds of the real run")
    ap.add_argument("--gpt-steps", type=int, default=60, help="gpt: timed steps per process")
    ap.add_argument("--gpt-rounds", type=int, default=10, help="gpt: paired process-level rounds")
    ap.add_argument("--ops-arm", default="core", help="ops: core, all, or one extension's name")
    ap.add_argument("--arm", action="append", help="peer-table: arms to run (floor, minimal, peer, core, all, "
                                                    "preloaded, magic)")
    ap.add_argument("--gpt-arm", default="bare", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.what == "_gpt-child":
        return gpt_child(args.gpt_arm, args.gpt_steps)
    if args.what == "_cg-child":
        return cg_child(args.cg_steps)
    if args.what == "_start-child":
        return start_child()
    if args.what == "_window-child":
        return window_child(args.window_s)
    if args.what == "peer-table":
        sys.path.insert(0, str(HERE.parent))
        from peer_table import ARMS, print_table
        from peer_table import table as peer_rows

        print("trainmeter side by side (callgrind, training thread; per step: (I(1,000 steps) - I(300 steps)) / 700 "
              "after 200 warm-up steps; tiny loop, OMP_NUM_THREADS=1, PYTHONHASHSEED=0)")
        return print_table(peer_rows(tuple(args.arm or ARMS)))
    print(f"trainmeter overhead, tiny loop (32-64-1 MLP, batch 32, OMP_NUM_THREADS=1), python {sys.version.split()[0]}")
    if args.what in ("all", "wall"):
        table(f"a. steady state, wall: paired rounds (bare {args.block} / run: {args.warmup} warm-up + {args.block} "
              f"measured / bare {args.block}), {args.rounds} rounds per arm, shuffled",
              bench_wall(args.rounds, args.block, args.warmup, ("control", "core", "all")))
    if args.what in ("all", "callgrind"):
        table(f"b. instructions (callgrind, training thread): slope over steps 200..{200 + args.cg_steps}",
              bench_callgrind(args.cg_steps))
    if args.what in ("all", "start"):
        table("c. start cost on the training thread", bench_start(args.repeats))
    if args.what in ("all", "window"):
        table(f"d. slowdown window after start (all extensions, {args.window_s:g} s of steps)",
              bench_window(args.repeats, args.window_s))
    if args.what in ("all", "ops"):
        table(f"g. Python opcodes per steady step (sys.settrace opcode events), arm {args.ops_arm}",
              bench_ops(args.ops_arm))
    if args.what == "gpt":  # not in "all": minutes of fresh processes
        table("f. tiny GPT, process-level paired runs", bench_gpt(args.gpt_rounds, args.gpt_steps))
    if args.what in ("all", "threads"):
        table(f"e. threads' CPU over a real run (/proc schedstat, {args.threads_s:g} s)", bench_threads(args.threads_s))


if __name__ == "__main__":
    main()
