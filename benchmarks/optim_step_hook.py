"""Per-step cost of the optimizer wing (docs/spec.md section 2): its sampled ``on_step``, the clip wrapper (``timeit``).

Arms (best of ``--repeat`` timeit runs of ``--number`` calls, microseconds per call):

- ``on_step``: the core's ``Monitor.on_step`` with no step hook (the baseline);
- ``on_step+hook (skipped)``: with the optim wing's hook on a step the sampling skips
  (a loop above 100 steps/s: the core compares the step with the hook's next step, nothing more);
- ``on_step+hook (sampled)``: with the hook on a sampled step (every step below 100
  steps/s): a ``param_groups`` dict read, the pending norm, one ``monitor.record``;
- ``clip_grad_norm_`` bare vs wrapped, on a 2-layer MLP's gradients.

Usage: ``python benchmarks/optim_step_hook.py [--number 20000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import tempfile
import timeit
import types
import weakref

import torch
import torch.nn as nn

from trainmeter.extensions import make_monitor
from trainmeter.optim.extension import OptimExtension
from trainmeter.options import make_options


def _best_us(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    a = parser.parse_args()
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, 32)).sum().backward()
    with tempfile.TemporaryDirectory() as root:
        ext = OptimExtension(environ={})
        m = make_monitor(make_options(run_dir=root, interval_s=86400, name="bench"), text=False, probes=False,
                         extensions=[ext]).start()
        m.set_step_hook(None)
        base = _best_us(lambda: m.on_step(0), a.number, a.repeat)
        # the probes' step state after the first counted step (its primary: the optimizer whose step was counted)
        ext._state = types.SimpleNamespace(primary=weakref.ref(opt))
        m.set_step_hook(ext.on_step)  # as the dispatcher arms it (the wing's own method, no frame between)
        m.next_step_hook_at(10**12, ext)  # as on the steps a stride skips
        skipped = _best_us(lambda: m.on_step(0), a.number, a.repeat)
        ext.stride = 1
        m.next_step_hook_at(0, ext)  # every step (a stride of 1 leaves the next step as it is)
        sampled = _best_us(lambda: m.on_step(0), a.number, a.repeat)
        # a second, sampled arm with a norm returned in the step (the clip wrapper's tensor)
        norm = torch.tensor(1.0)
        clip = ext.clip
        sampled_norm = _best_us(lambda: (setattr(clip, "pending", norm), setattr(clip, "pending_step", m.steps),
                                         m.on_step(0)), a.number, a.repeat)
        wrapped = _best_us(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), a.number // 10, a.repeat)
        m.finish("completed")
    bare = _best_us(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), a.number // 10, a.repeat)
    print(f"on_step                      {base:7.3f} us")
    print(f"on_step+hook (skipped)       {skipped:7.3f} us  (+{skipped - base:.3f})")
    print(f"on_step+hook (sampled)       {sampled:7.3f} us  (+{sampled - base:.3f}, lr only)")
    print(f"on_step+hook (sampled+norm)  {sampled_norm:7.3f} us  (+{sampled_norm - base:.3f}, lr + CPU grad_norm)")
    print(f"clip_grad_norm_ bare         {bare:7.3f} us")
    print(f"clip_grad_norm_ wrapped      {wrapped:7.3f} us  ({wrapped / bare:.3f}x)")


if __name__ == "__main__":
    main()
