"""Monitored / bare wall time on the stacks of tests/field/, alternating runs.

Each stack is trained the way its field test does it (tiny models built from configs,
no sleeps injected), ``--pairs`` times bare and monitored in alternation (bare first,
then monitored, so drift on a shared machine hits both), after one warm-up run of each
(imports, first compile). Prints per stack the median bare and monitored seconds and
their ratio. A stack whose library is missing is skipped.

Usage: ``python benchmarks/field_overhead.py [--pairs 5] [--stacks empty,hand,accelerate,compiled,gan,hf,lightning]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def _empty() -> Callable[[], Any]:
    """Nothing in the cell: the monitor's fixed cost (start, final report, passport)."""
    return lambda: None


def _hand() -> Callable[[], Any]:
    """2,000 steps of a tiny model: the per-step cost (probes, call wrapper, loss capture)."""
    import torch.nn.functional as F
    from tests.conftest import tiny_model_and_data

    model, opt, batches = tiny_model_and_data()

    def run() -> None:
        for _ in range(100):
            for x, y in batches:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()

    return run


def _accelerate() -> Callable[[], Any]:
    from tests.field.test_accelerate_loop import _train

    return _train


def _compiled() -> Callable[[], Any]:
    from tests.field.test_compiled_loop import _train

    return _train


def _gan() -> Callable[[], Any]:
    from tests.field.test_gan_and_generators import _gan as gan

    return gan


def _hf() -> Callable[[], Any]:
    from tests.field.test_transformers_trainer import _trainer

    def run() -> None:
        with tempfile.TemporaryDirectory() as out:
            trainer, _ = _trainer(Path(out), sleeps=False)
            trainer.train()

    return run


def _lightning() -> Callable[[], Any]:
    from tests.field.test_lightning_trainer import _fit, _loader

    def run() -> None:
        with tempfile.TemporaryDirectory() as out:
            module, trainer = _fit(Path(out), sleeps=False)
            trainer.fit(module, _loader(64, 0), _loader(8, 1))

    return run


STACKS: dict[str, Callable[[], Callable[[], Any]]] = {
    "empty": _empty, "hand": _hand, "accelerate": _accelerate, "compiled": _compiled, "gan": _gan, "hf": _hf, "lightning": _lightning}


def _timed(run: Callable[[], Any], monitored: bool, runs_dir: Path) -> float:
    import trainmeter as tm

    t0 = time.perf_counter()
    if monitored:
        with tm.monitor(run_dir=runs_dir, interval_s=1.0):
            run()
    else:
        run()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--stacks", default=",".join(STACKS))
    args = parser.parse_args()
    import contextlib
    import io

    print(f"{'stack':<12}{'bare s':>10}{'monitored s':>14}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as runs:
        for name in args.stacks.split(","):
            try:
                run = STACKS[name]()
            except ImportError as exc:
                print(f"{name:<12} skipped ({exc.name} missing)")
                continue
            bare: list[float] = []
            ours: list[float] = []
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                _timed(run, False, Path(runs))
                _timed(run, True, Path(runs))
                for _ in range(args.pairs):
                    bare.append(_timed(run, False, Path(runs)))
                    ours.append(_timed(run, True, Path(runs)))
            b, o = statistics.median(bare), statistics.median(ours)
            ratio = f"{o / b:>8.3f}" if b >= 1e-3 else f"{'-':>8}"  # nothing to divide by: o is the fixed cost
            print(f"{name:<12}{b:>10.3f}{o:>14.3f}{ratio}", flush=True)


if __name__ == "__main__":
    main()
