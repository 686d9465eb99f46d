"""The side-by-side table's reference arms: a minimal monitor with trainmeter's exact counting, and the floor.

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
    """Exact counting in three small closures: the root's ``forward`` (an instance attribute over it, so
    ``Module.__call__`` keeps its no-hook fast path), ``torch.autograd.backward`` (its own parameters, so no
    tuple or dict is built per call) and a global optimizer step post-hook."""

    __slots__ = ("steps", "tokens", "pending_tokens", "loss", "times", "losses", "_undo")

    def __init__(self) -> None:
        self.steps = 0
        self.tokens = 0
        self.pending_tokens = 0
        self.loss = 0.0
        self.times: list[float] = []
        self.losses: list[float] = []
        self._undo: list[Any] = []

    def start(self, model: Any) -> MinimalMonitor:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        me = self
        clock = time.perf_counter
        t0 = clock()
        forward = model.forward
        original = torch.autograd.backward
        tensor_type = torch.Tensor

        def counted_forward(*args: Any, **kwargs: Any) -> Any:
            if args:
                me.pending_tokens += args[0].shape[0]
            return forward(*args, **kwargs)

        def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None, create_graph: bool = False,
                     grad_variables: Any = None, inputs: Any = None) -> Any:
            if type(tensors) is tensor_type and tensors.ndim == 0 and tensors.is_cpu:
                me.loss = tensors.item()
            return original(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)

        def on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            me.steps += 1
            me.tokens += me.pending_tokens
            me.pending_tokens = 0
            me.times.append(clock() - t0)
            me.losses.append(me.loss)

        model.forward = counted_forward
        torch.autograd.backward = backward
        handle = register_optimizer_step_post_hook(on_step)
        self._undo = [lambda: vars(model).pop("forward", None), lambda: setattr(torch.autograd, "backward", original),
                      handle.remove]
        return self

    def finish(self) -> None:
        for undo in self._undo:
            undo()


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
