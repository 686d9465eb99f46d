"""Side by side under callgrind: trainmeter, the peer, a minimal monitor and the floor (docs/spec.md section 20).

One command prints the table (``python benchmarks/overhead.py peer-table``, or this file alone):
instructions on the training thread (``--separate-threads=yes``, thread 1), for each arm in a
fresh process of its own under valgrind callgrind, on one of three loops (``--loop``; ``OMP_NUM_THREADS=1``,
``PYTHONHASHSEED=0``, so counts repeat to the instruction): ``mlp``, the tiny loop of benchmarks/overhead.py (a
32-64-1 MLP, batch 32, SGD); ``gpt``, a hand-written loop over a 2-block causal transformer called positionally
(:func:`make_gpt_loop`); ``hf``, GPT-2 (2 layers) under the HF Trainer, which calls the model with keyword
arguments and ``model.train()`` every step (:func:`make_hf_loop`). Per step: after the warm-up steps (mlp: 200),
the slope between a short and a long segment (mlp: 300 and 1,000 steps, ``(I(1000) - I(300)) / 700``; ``SEGMENTS``
has the gpt and hf loops' fewer, dearer steps), minus the same slope of the bare loop measured in that process
first; the heap is collected and frozen (``gc.freeze``) before each slope, so its
collections scan only what the slope's steps allocate. Start, first report (right after the 200
warm-up steps), later report (after the slope) and finish are the instructions of each call.
Reports are forced (the interval is 3600 s, so none falls inside a slope). The peer's venv (made on first use)
reads torch, and for the hf loop transformers, from this interpreter's site-packages when it has no torch of its own
(see :func:`peer_python`). Import is what loads each
arm's monitor ahead of its run, once per process, after torch (and, for ``%%trainmeter``, IPython) is
imported: the peer's agent module (its sitecustomize imports it at interpreter start), ``%load_ext
trainmeter``, ``import trainmeter`` and ``tm.preload()``, or ``import trainmeter`` alone (a cold
``tm.monitor()`` then imports its wings at its start).

Each arm's process starts one idle thread before anything else (``--no-idle-thread``: none), so every bare
slope runs in a process that already has a thread, as the ``%%trainmeter`` arm's always does (IPython's history
thread) and a real loop's does (a kernel's threads, a DataLoader's pin-memory thread, torch's intra-op pool:
``OMP_NUM_THREADS=1`` here keeps it out). In a process that never had a thread glibc's malloc and free skip their
locks, so an arm that starts threads (ours) would also pay for the loop's own allocations getting dearer, which
the bare slope before it did not, the magic arm's bare slope did, and the peer (no thread) never does: on the gpt
loop +59k instructions a step (``_int_free``, ``pthread_mutex_unlock``, ``malloc``), which the ``preloaded`` arm
carried and the ``magic`` arm did not (docs/spec.md section 20, "One thread before the bare slope").

``--preload`` runs ``trainmeter.extensions.preload()`` (what ``%load_ext trainmeter`` imports ahead) in the core and
``tm.monitor()`` arms' processes before their bare slope, as the ``%%trainmeter`` arm's ``%load_ext`` does: the
arms then differ only in how the run is started, not in whether ~120 modules were imported between the bare slope
and the arm's.

``--slow-threads N`` multiplies the periods of our timed threads (node sampler, alerts watchdog, the report worker's
folds) by N once the run has started: callgrind runs the loop 38-48x slower than natively while they keep
wall-clock periods, so each step would meet ~40x its native wake-ups (each takes the GIL), more on a loaded machine.
``--repeats N`` runs each arm in N processes: medians, and each process's per-step figure (the same code differs
by ~1-3k per step from process to process: docs/spec.md section 20, "From process to process").

valgrind runs with ``--fair-sched=yes``: its default lock can keep a thread of ours that waits for the GIL off the
CPU for a whole segment (docs/spec.md section 20, "Two sources of the spread").

Arms: ``floor`` (a step hook and one clock read), ``minimal`` (benchmarks/minimal_monitor.py:
batch shape, loss read, step hook), ``peer`` (trainmeter 0.0.7 from PyPI, in its own venv
under ``~/.cache/trainmeter/peer-0.0.7``: its in-process agent, installed as its
``sitecustomize`` does once torch is imported, with its socket read by this process as its
``tm`` reads it; a report is its flush, whose 50 ms timer is set to an hour like ours), ``core``
(no extensions), ``all`` (``tm.monitor()``: every default extension, in a cold script), ``preloaded``
(``tm.preload()`` ahead of the loop, then ``tm.monitor()``) and ``magic`` (``%%trainmeter`` in an IPython shell).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"
PEER_VENV = Path.home() / ".cache" / "trainmeter" / "peer-0.0.7"
PEER_WHEEL = "trainmeter==0.0.7"
ARMS = ("floor", "minimal", "peer", "core", "all", "preloaded", "magic")
LABELS = {"floor": "a step hook + one clock read (the floor)",
          "minimal": "a minimal hand-written monitor (batch shape, loss read, step hook)",
          "peer": "the peer, trainmeter 0.0.7 (its in-process agent; a report is its flush)",
          "core": "ours, core only", "all": "ours, `tm.monitor()` with every extension",
          "preloaded": "ours, `tm.preload()` then `tm.monitor()`",
          "magic": "ours, `%%trainmeter`"}
LOOPS = ("mlp", "gpt", "hf")
# warm-up, short and long segment of each loop (steps): the GPT and HF steps cost ~10-30x the MLP's
SEGMENTS = {"mlp": (200, 300, 1000), "gpt": (12, 15, 45), "hf": (10, 12, 42)}
WARMUP, SHORT, LONG = SEGMENTS["mlp"]
MARK = os.getppid  # callgrind dumps before each call (--dump-before=getppid)


# -- the child (under valgrind) ------------------------------------------------------------------
def _settle() -> None:
    """Collect, then freeze what is left: the slope's collections then scan only what its steps allocate (the
    full heap's size, which differs from process to process by what each imported, moved a slope by ~2k)."""
    gc.collect()
    gc.freeze()


def _segments(steps: Callable[[int], None], report: Callable[[], None], scale: int,
              quiesce: Callable[[], None] = lambda: None) -> None:
    """After start: warm-up, first report, the two slope segments, later report (each ended by a MARK).

    ``quiesce`` runs in the ignored segment after the first report: ours waits for the report worker's one-off
    jobs (the first report's counted pass) to end, so the slopes measure the steady step and not the GIL
    hand-offs of a pass that runs once per run (its own cost is on the worker thread, in no column).
    """
    steps(WARMUP // scale)
    MARK()  # warm-up
    report()
    MARK()  # first report
    quiesce()
    _settle()
    MARK()  # settled (ignored)
    steps(SHORT // scale)
    MARK()  # short segment
    steps(LONG // scale)
    MARK()  # long segment
    report()
    MARK()  # later report


def make_gpt_loop() -> tuple[Callable[[int], None], Any]:
    """The tiny GPT loop's ``steps(n)`` and model: a 2-block causal transformer (vocab 128, width 32, 4 heads,
    batch 4 x 32 tokens) called positionally, cross-entropy, AdamW."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab, seq, width, batch = 128, 32, 32, 4

    from overhead import tiny_gpt

    model = tiny_gpt(vocab, seq, width)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (batch, seq + 1))
    x, y = data[:, :-1], data[:, 1:].flatten()

    def steps(n: int) -> None:
        for _ in range(n):
            loss = F.cross_entropy(model(x).flatten(0, 1), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return steps, model


def make_hf_loop() -> tuple[Callable[[int], None], Any]:
    """The HF Trainer loop's ``steps(n)`` (one ``trainer.train()`` of ``max_steps=n``: its set-up is the same in
    both slope segments, so the slope holds only the steps) and model: ``GPT2LMHeadModel`` built from a config
    (2 layers, n_embd 32, vocab 128; nothing downloaded), batch 4 x 32 tokens, AdamW, no logging, eval or saves."""
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.set_num_threads(1)
    transformers.set_seed(0)
    transformers.logging.set_verbosity_error()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    ids = torch.randint(0, 128, (4 * 1200, 32), generator=torch.Generator().manual_seed(0))

    class Rows(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(ids)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": ids[i], "labels": ids[i]}

    out = tempfile.mkdtemp(prefix="tm-peer-table-hf-")
    args = TrainingArguments(output_dir=out, max_steps=1, per_device_train_batch_size=4, logging_strategy="no",
                             save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, seed=0, dataloader_num_workers=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(), optimizers=(opt, None))

    def steps(n: int) -> None:
        trainer.args.max_steps = max(n, 1)  # 0 would mean "by epochs"
        trainer.train()

    return steps, model


def make_loop(loop: str) -> tuple[Callable[[int], None], Any]:
    """``steps(n)`` and the model of ``loop`` (mlp: benchmarks/overhead.py's tiny loop)."""
    if loop == "gpt":
        return make_gpt_loop()
    if loop == "hf":
        return make_hf_loop()
    from overhead import make_loop_and_model  # stdlib only at import: the peer's venv loads it too

    return make_loop_and_model()


def _peer_agent() -> Any:
    """The peer's agent, installed as its sitecustomize does (torch already imported: it attaches at once)."""
    import torch.optim.optimizer as optimizer_module
    from trainmeter.agent import core

    core.FLUSH_INTERVAL = 3600.0  # reports are forced, as ours are (interval_s 3600)
    core.install()
    for hook in optimizer_module._global_optimizer_post_hooks.values():
        agent = getattr(hook, "__self__", None)
        if isinstance(agent, core.Agent):
            return agent
    raise RuntimeError("the peer's agent did not attach (is TRAINMETER_SOCK set?)")


def _slow_threads(m: Any, factor: float) -> None:
    """Stretch the periods of our timed threads (node sampler, alerts' watchdog, the worker's folds) by ``factor``.

    callgrind runs the loop ~40x slower than natively while these threads keep wall-clock periods, so without it
    each step meets ~40x the wake-ups (and GIL hand-offs) it meets natively (see ``--slow-threads``). The fields
    set are private ones of the wings and the worker: a benchmark's knob, not an option of the product.
    """
    node = m.dispatch.find("node")
    if node is not None:
        node.period_s *= factor
    alerts = m.dispatch.find("alerts")
    if alerts is not None:  # its watchdog thread reads the period at each wait
        alerts._watch_interval_s *= factor
    m.worker._fold_every_s *= factor


def child(arm: str, scale: int, idle_thread: bool = True, preload: bool = False, slow_threads: float = 1.0,
          loop: str = "mlp") -> None:
    """One arm: bare slope first, then the arm's start, segments and finish, each ended by a MARK."""
    global WARMUP, SHORT, LONG
    WARMUP, SHORT, LONG = SEGMENTS[loop]
    if idle_thread:  # the process has a thread before the bare slope (see the module docstring)
        threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()
    import torch  # noqa: F401  (the user's import, before the monitor's)

    if arm == "magic":  # a notebook's kernel has IPython loaded before any cell
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
    MARK()  # interpreter start, torch (ignored)
    if arm in ("core", "all", "preloaded", "magic"):
        import trainmeter  # (the user's import, before the loop)

        if arm == "preloaded" or (preload and arm != "magic"):  # imported ahead, here before the bare slope too
            trainmeter.preload()
    if arm == "peer":
        import trainmeter.agent.core  # noqa: F401  (its sitecustomize's import, at interpreter start)
    if arm in ("floor", "minimal"):
        import minimal_monitor  # noqa: F401
    if arm == "magic":
        trainmeter.load_ipython_extension(shell)  # the notebook's `%load_ext trainmeter`, a cell before the run's
    MARK()  # import: the monitor loaded ahead of the run, once per process
    steps, model = make_loop(loop)
    steps(WARMUP // 4)
    _settle()
    MARK()  # imports and set-up (ignored)
    steps(SHORT // scale)
    MARK()  # bare short
    steps(LONG // scale)
    MARK()  # bare long
    root = tempfile.mkdtemp(prefix="tm-peer-table-")
    if arm in ("floor", "minimal"):
        from minimal_monitor import Floor, MinimalMonitor

        mon = (Floor() if arm == "floor" else MinimalMonitor()).start(model)
        MARK()  # start
        _segments(steps, lambda: None, scale)
        mon.finish()
    elif arm == "peer":
        agent = _peer_agent()
        MARK()  # start
        _segments(steps, agent.flush, scale)
        agent.flush()  # its finish: the flush it registers with atexit
    elif arm in ("core", "all", "preloaded"):
        import trainmeter as tm

        if arm != "core":
            cm = tm.monitor(name="peer-table", run_dir=root, interval_s=3600)
        else:
            from trainmeter.api import run_monitored
            from trainmeter.extensions import make_monitor
            from trainmeter.options import make_options

            options = make_options(name="peer-table", run_dir=root, interval_s=3600)
            cm = run_monitored(make_monitor(options, extensions=[]))
        m = cm.__enter__()
        MARK()  # start
        if slow_threads != 1.0:
            _slow_threads(m, slow_threads)
        _segments(steps, lambda: _force_report(m), scale, m.worker.drain)
        cm.__exit__(None, None, None)
    else:  # magic: the cell calls the MARKs; its start is the magic's call up to the cell's first line
        from trainmeter.core.monitor import active
        from trainmeter.magic import parse_flags, run_cell

        shell.user_ns.update(MARK=MARK, _segments=_segments, steps=steps, scale=scale,
                             report=lambda: _force_report(active()), quiesce=lambda: active().worker.drain(),
                             slow=lambda: _slow_threads(active(), slow_threads))
        slow = "slow()\n" if slow_threads != 1.0 else ""
        run_cell(shell, f"MARK()\n{slow}_segments(steps, report, scale, quiesce)\n",
                 parse_flags(f"--name peer-table --dir {root} --interval 3600"))
    MARK()  # finish
    shutil.rmtree(root, ignore_errors=True)


def _force_report(m: Any) -> None:
    m.steps_state.next_report_s = 0.0
    m.maybe_report()


# -- the parent -------------------------------------------------------------------------------------
def peer_python() -> Path:
    """The peer venv's python, made on first use (``python3 -m venv``, the wheel ``--no-deps``): its own
    trainmeter comes first on its path, then this interpreter's site-packages (torch, transformers) through a
    ``.pth`` line, so both sides run the same torch and nothing else is downloaded."""
    python = PEER_VENV / "bin" / "python"
    if python.exists():
        return python
    import site

    subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", PEER_WHEEL], check=True)
    own = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                         capture_output=True, text=True).stdout.strip()
    Path(own, "zz-host-site-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


class _Socket:
    """The peer's supervisor end: a datagram socket read until closed (what its ``tm`` binds)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tm-peer-sock-")
        self.path = f"{self.dir}/events.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.records = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(65536)
                self.records += 1
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _env(arm: str, sock: str | None) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "trainmeter-bench-pycache"))
    if arm == "peer":
        env.pop("PYTHONPATH", None)  # the peer's package is also named trainmeter: ours must not shadow it
        env["TRAINMETER_SOCK"] = sock or ""
        return [str(peer_python())], env
    env["PYTHONPATH"] = str(SRC)  # this tree's trainmeter
    return [sys.executable], env


def _run_arm(arm: str, out_dir: str, idle_thread: bool = True, preload: bool = False,
             slow_threads: float = 1.0, loop: str = "mlp") -> tuple[str, list[int] | str]:
    sock = _Socket() if arm == "peer" else None
    try:
        python, env = _env(arm, sock.path if sock else None)
        script = [str(HERE), "_child", "--arm", arm, "--idle-thread" if idle_thread else "--no-idle-thread",
                  *(["--preload"] if preload else []), "--slow-threads", str(slow_threads), "--loop", loop]
        warm = subprocess.run([*python, *script, "--scale", "20"], env=env, capture_output=True, text=True)
        if warm.returncode != 0:  # bytecode compiled, and the arm known to run, before valgrind
            return arm, f"failed: {warm.stderr[-1500:]}"
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--fair-sched=yes", "--dump-instr=no",
               "--dump-before=getppid", f"--callgrind-out-file={out_dir}/{arm}.%p", *python, *script]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            return arm, f"failed: {proc.stderr[-1500:]}"
    finally:
        if sock is not None:
            sock.close()
    return arm, _parts(out_dir, arm)


def _parts(out_dir: str, arm: str) -> list[int]:
    """The training thread's instructions per part, in order (read as overhead.py's callgrind mode reads them)."""
    from overhead import cg_parts

    main, _ = cg_parts(f"{out_dir}/{arm}.*")
    return [main.get(i, 0) for i in range(1, max(main) + 1)]


def _instr(n: float) -> str:
    return f"{n / 1e6:.1f}M" if abs(n) >= 1e6 else f"{n / 1e3:.0f}k"


def table(arms: tuple[str, ...] = ARMS, jobs: int = 2, idle_thread: bool = True,
          preload: bool = False, slow_threads: float = 1.0, repeats: int = 1, loop: str = "mlp",
          keep: str | None = None) -> list[tuple[str, ...]]:
    """Run each arm under callgrind in ``repeats`` processes (``jobs`` at a time) and return the table's rows.

    ``keep``: a folder that keeps the callgrind files (``<arm>-<i>/<arm>.<pid>.<part>-<thread>``, for
    ``callgrind_annotate``); without it they are deleted.

    With several processes an arm's cells are the median over them, and the per-step cell lists each process's
    figure: the same code differs by ~1-3k per step from process to process (docs/spec.md section 20, "From
    process to process").
    """
    if shutil.which("valgrind") is None:
        return [("peer-table", "valgrind not found (apt-get install -y valgrind)")]
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    out_dir = keep or tempfile.mkdtemp(prefix="tm-peer-table-cg-")
    runs = [(arm, i) for i in range(repeats) for arm in arms]
    for arm, i in runs:
        os.makedirs(f"{out_dir}/{arm}-{i}", exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda r: _run_arm(r[0], f"{out_dir}/{r[0]}-{r[1]}", idle_thread, preload,
                                                slow_threads, loop)[1], runs))
    _warmup, short_steps, long_steps = SEGMENTS[loop]
    if keep is None:
        shutil.rmtree(out_dir, ignore_errors=True)
    results: dict[str, list[list[int] | str]] = {arm: [] for arm in arms}
    for (arm, _i), seq in zip(runs, done, strict=True):
        results[arm].append(seq)
    rows = [("arm", "added per step", "import (once per process)", "start", "first report", "later report", "finish")]
    bare_all = []
    for arm in arms:
        failed = [seq for seq in results[arm] if isinstance(seq, str)]
        if failed:
            rows.append((LABELS[arm], str(failed[0]).replace("\n", " ")[-300:], "", "", "", "", ""))
            continue
        added_all, bare_arm, cells = [], [], []
        for seq in results[arm]:
            (_interpreter, loaded, _setup, b_short, b_long, start, _warm, first, _settled, short, long_, later,
             finish) = seq[:13]
            bare = (b_long - b_short) / (long_steps - short_steps)
            bare_arm.append(bare)
            added_all.append((long_ - short) / (long_steps - short_steps) - bare)
            cells.append((loaded, start, first, later, finish))
        bare_all += bare_arm
        added, bare = statistics.median(added_all), statistics.median(bare_arm)
        loaded, start, first, later, finish = (statistics.median(c[k] for c in cells) for k in range(5))
        per_step = f"{added / 1e3:+.1f}k ({added / bare * 100:+.2f}%)"
        if len(added_all) > 1:
            per_step += " (each: " + ", ".join(f"{a / 1e3:+.1f}k" for a in added_all) + ")"
        reported = arm not in ("floor", "minimal")
        rows.append((LABELS[arm], per_step, _instr(loaded),
                     _instr(start) if arm != "floor" else "—", _instr(first) if reported else "—",
                     _instr(later) if reported else "—", _instr(finish) if reported else "—"))
    if bare_all:
        rows.insert(1, ("bare loop, per step", f"{min(bare_all) / 1e3:.1f}k .. {max(bare_all) / 1e3:.1f}k", "", "", "",
                        "", ""))
    return rows


def print_table(rows: list[tuple[str, ...]]) -> None:
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows[1:]:
        print("| " + " | ".join(r) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", default="table", choices=("table", "_child"))
    ap.add_argument("--arm", action="append", choices=ARMS, help="arms to run (default: all six)")
    ap.add_argument("--loop", choices=LOOPS, default="mlp",
                    help="mlp: the tiny MLP loop; gpt: a tiny causal transformer, hand-written loop; hf: GPT-2 "
                         "(2 layers) under the HF Trainer")
    ap.add_argument("--jobs", type=int, default=2, help="valgrind processes at a time")
    ap.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--idle-thread", action=argparse.BooleanOptionalAction, default=True,
                    help="one idle thread in each arm's process before the bare slope (default; the magic arm's "
                         "process has IPython's either way)")
    ap.add_argument("--preload", action="store_true",
                    help="the core and tm.monitor() arms import what %%load_ext imports ahead before their bare slope")
    ap.add_argument("--slow-threads", type=float, default=1.0, metavar="N",
                    help="our timed threads' periods x N after start (callgrind's slowdown: they then wake as often "
                         "per step as natively)")
    ap.add_argument("--repeats", type=int, default=1, metavar="N",
                    help="N processes per arm: medians, and each process's per-step figure")
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind files in DIR (for callgrind_annotate)")
    args = ap.parse_args()
    for bad, say in ((args.repeats < 1, f"--repeats must be at least 1 (got {args.repeats})"),
                     (not args.slow_threads > 0, f"--slow-threads must be above 0 (got {args.slow_threads:g})")):
        if bad:
            ap.error(say)
    if args.what == "_child":
        sys.path.insert(0, str(HERE.parent))
        return child(args.arm[0], args.scale, args.idle_thread, args.preload, args.slow_threads, args.loop)
    print(f"trainmeter side by side (callgrind, training thread; {args.loop} loop; python {sys.version.split()[0]})")
    if not args.idle_thread:
        print("(no idle thread: --no-idle-thread; the script arms' figures include the process's first thread)")
    if args.preload:
        print("(the core and tm.monitor() arms import what %load_ext imports ahead before their bare slope: --preload)")
    if args.slow_threads != 1.0:
        print(f"(our timed threads' periods x {args.slow_threads:g} after start: --slow-threads)")
    print_table(table(tuple(args.arm or ARMS), args.jobs, args.idle_thread, args.preload, args.slow_threads,
                      args.repeats, args.loop, args.keep))


if __name__ == "__main__":
    main()
