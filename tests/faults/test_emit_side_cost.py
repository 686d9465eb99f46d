"""Issue 40 item 8(c): side threads calling ``tm.emit`` flat out run none of trainmeter's code on the training thread.

Counted, not timed: the Python calls into trainmeter a steady step makes on the training thread (``sys.setprofile``,
that thread only) are the same beside four threads emitting flat out as with none. What the side threads still cost
is the GIL's share, as any busy thread's (``benchmarks/emit_threads.py``; docs/spec.md section 18).
"""

from __future__ import annotations

import sys
import threading

import pytest
import torch

import trainmeter as tm


def _calls_per_step(run_root, side_threads: int) -> tuple[dict[str, int], int]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    stop, emitted = threading.Event(), [0] * side_threads

    def side(k: int) -> None:
        while not stop.is_set():
            tm.emit(**{f"side{k}": 1.0})
            emitted[k] += 1

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    calls: dict[str, int] = {}

    def profile(frame, event, arg):
        if event == "call" and "/trainmeter/" in frame.f_code.co_filename:
            code = frame.f_code  # (3.10: no co_qualname; the function's place names it)
            name = getattr(code, "co_qualname", f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}")
            calls[name] = calls.get(name, 0) + 1

    with tm.monitor(run_dir=run_root, name=f"side{side_threads}", interval_s=3600):
        for _ in range(20):
            step()
        threads = [threading.Thread(target=side, args=(k,)) for k in range(side_threads)]
        for t in threads:
            t.start()
        while side_threads and sum(emitted) < 5_000:  # the side threads are emitting, the folding thread folding
            step()
        sys.setprofile(profile)
        try:
            for _ in range(50):
                step()
        finally:
            sys.setprofile(None)
        stop.set()
        for t in threads:
            t.join()
    return calls, sum(emitted)


@pytest.mark.monitor_warns("later ones are counted and dropped")  # flat out, the queue's bound is met
def test_four_side_threads_emitting_flat_out_add_no_call_to_the_training_threads_steps(run_root):
    alone, _ = _calls_per_step(run_root / "alone", 0)
    beside, emitted = _calls_per_step(run_root / "beside", 4)
    assert emitted >= 5_000
    assert beside == alone  # the same trainmeter calls on the training thread, one by one
