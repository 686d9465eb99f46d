"""Per-rank step timing: time outside backward, the primary optimizer only, torch left as found."""

from __future__ import annotations

import torch

from trainmeter.ranks.timing import StepTiming


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


class Probes:
    """The torch probes' backward patch, as far as StepTiming sees it."""

    def __init__(self) -> None:
        self._orig_backward = torch.Tensor.backward

        def patched(tensor, *a, **k):
            return self._orig_backward(tensor, *a, **k)

        self._patched_backward = patched
        torch.Tensor.backward = patched

    def stop(self) -> None:
        if torch.Tensor.backward is self._patched_backward:
            torch.Tensor.backward = self._orig_backward
        self._patched_backward = None


def test_torch_backward_is_restored_when_the_probes_stop_first():
    original = torch.Tensor.backward
    probes = Probes()
    timing = StepTiming(probes)
    timing.start()
    probes.stop()  # finds our wrapper on top and leaves it
    timing.stop()
    assert torch.Tensor.backward is original


def test_torch_backward_is_restored_when_the_timing_stops_first():
    original = torch.Tensor.backward
    probes = Probes()
    timing = StepTiming(probes)
    timing.start()
    timing.stop()
    probes.stop()
    assert torch.Tensor.backward is original


def test_no_optimizer_hook_is_left_behind():
    from torch.optim import optimizer

    before = dict(optimizer._global_optimizer_post_hooks)
    timing = StepTiming()
    timing.start()
    timing.stop()
    timing.stop()
    assert dict(optimizer._global_optimizer_post_hooks) == before
