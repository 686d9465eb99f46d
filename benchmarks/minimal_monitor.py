"""The side-by-side table's reference arms: a minimal hand-written monitor with trainmeter's exact counting, and the floor.

:class:`MinimalMonitor` counts what trainmeter's core counts on a steady step, in the fewest
operations plain Python allows: every call of the root module adds its batch's leading
dimension (batch shape), every ``torch.autograd.backward`` of a 0-d CPU loss reads its value
(loss read), and every optimizer step appends the step's time, tokens and loss (step hook).
Nothing is sampled. :class:`Floor` is a step hook that reads the clock once: what any
monitor that counts steps pays at least. Both are for benchmarks/peer_table.py only.
"""

from __future__ import annotations

import time
from typing import Any


class MinimalMonitor:
    """Exact counting with a forward pre-hook, one ``autograd.backward`` wrapper and a step post-hook."""

    def __init__(self) -> None:
        self.steps = 0
        self.tokens = 0
        self.pending_tokens = 0
        self.loss = 0.0
        self.times: list[float] = []
        self.losses: list[float] = []
        self._handles: list[Any] = []
        self._backward: Any = None

    def start(self, model: Any) -> MinimalMonitor:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._t0 = time.perf_counter()
        self._handles.append(model.register_forward_pre_hook(self._on_forward))
        self._handles.append(register_optimizer_step_post_hook(self._on_step))
        original = self._backward = torch.autograd.backward
        tensor_type = torch.Tensor
        me = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if type(tensors) is tensor_type and tensors.ndim == 0 and tensors.is_cpu:
                me.loss = tensors.item()
            return original(tensors, *args, **kwargs)

        torch.autograd.backward = backward
        return self

    def _on_forward(self, module: Any, args: Any) -> None:
        if args:
            self.pending_tokens += args[0].shape[0]

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1
        self.tokens += self.pending_tokens
        self.pending_tokens = 0
        self.times.append(time.perf_counter() - self._t0)
        self.losses.append(self.loss)

    def finish(self) -> None:
        import torch

        for handle in self._handles:
            handle.remove()
        torch.autograd.backward = self._backward


class Floor:
    """A step post-hook that reads the clock once (and keeps the reading)."""

    def start(self, model: Any) -> Floor:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.times: list[float] = []
        append, clock = self.times.append, time.perf_counter
        self._handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: append(clock()))
        return self

    def finish(self) -> None:
        self._handle.remove()
