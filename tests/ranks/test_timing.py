"""Per-rank step timing: time outside backward, the primary optimizer only, torch left as found."""

from __future__ import annotations

import pytest
import torch

from trainmeter.ranks.stragglers import StepTiming


def train(steps: int, opt: torch.optim.Optimizer, model: torch.nn.Module, other=None) -> None:
    for _ in range(steps):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        if other is not None:
            other.step()


def test_steps_after_the_first_are_timed_and_backward_is_excluded():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    timing = StepTiming()
    timing.start()
    try:
        train(5, opt, model, other)
    finally:
        timing.stop()
    summary = timing.take_window()
    assert summary["timed_steps"] == 4  # the first step is warm-up; the second optimizer is not counted
    assert 0 <= summary["outside_backward_s"] <= summary["step_s"]
    assert summary["window"]["steps"] == 4 and summary["best_window_step_s"] == summary["window"]["step_s"]
    assert timing.take_window()["window"] == {"steps": 0, "step_s": None, "outside_backward_s": None}


@pytest.mark.parametrize("timing_first", [True, False])
def test_torch_is_left_as_found_whether_the_probes_or_the_timing_stop_first(run_root, timing_first):
    import trainmeter as tm

    tensor_backward, autograd_backward = torch.Tensor.backward, torch.autograd.backward
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    timing = StepTiming()
    with tm.monitor(run_dir=run_root, widget=False) as m:  # the probes wrap torch.autograd.backward
        assert torch.autograd.backward is not autograd_backward
        timing.start()  # ours wraps Tensor.backward, which calls the probes' torch.autograd.backward
        train(3, opt, model)
        if timing_first:
            timing.stop()
    timing.stop()
    assert m.steps == 3 and timing.steps == 2  # both saw the steps
    assert torch.Tensor.backward is tensor_backward and torch.autograd.backward is autograd_backward


def test_no_optimizer_hook_is_left_behind():
    from torch.optim import optimizer

    before = dict(optimizer._global_optimizer_post_hooks)
    timing = StepTiming()
    timing.start()
    timing.stop()
    timing.stop()
    assert dict(optimizer._global_optimizer_post_hooks) == before
