"""Torch probes: optimizer steps, tokens per step, the trained model, captured loss.

Installed for one monitored cell and removed at its end:

- a global optimizer step post-hook counts steps of the first optimizer that
  steps (the primary one; others are ignored);
- until the first step, global forward hooks note the top-level modules called
  in training mode and their batches; at the first step the one holding most
  of the optimizer's parameters becomes the root, its ``forward`` is wrapped
  for the run, and the global hooks are removed;
- ``torch.Tensor.backward`` is wrapped to read a 0-d loss without a sync
  (torch has no global hook that sees the tensor ``backward`` starts from).

Per step in steady state the hot path is a handful of calls (issue 12,
``tests/core/test_hot_path.py``): the root wrapper reads one shape and dtype and
counts a positional batch like the last counted one the same (exact: same
type, position, shape and dtype), the loss of a CPU tensor is read directly, and
the step hook hands one count and the losses to the monitor.

Every callback is guarded: a fault warns once and disables that probe.
Callbacks run on the training thread.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Protocol

from trainmeter.core.batch import count_batch


class StepSink(Protocol):
    """What the probes call on the run (:class:`~trainmeter.core.monitor.Monitor`). Training thread."""

    steps: int
    token_unit: str

    def on_step(self, tokens: int, losses: list[float] | None = None) -> None: ...

    def read_scalar(self, value: Any, key: Any) -> float | None: ...

    def set_model(self, module: Any, token_unit: str) -> None: ...

    def warn_once(self, key: str, message: str) -> None: ...

MAX_CANDIDATES = 64
_MISSING = object()
DISCOVERY_STEPS = 20


class TorchProbes:
    """The in-process torch hooks of one run.

    Args:
        monitor: The run they report to.
    """

    name = "torch"

    def __init__(self, monitor: StepSink) -> None:
        self._monitor = monitor
        self._handles: list[Any] = []
        self._discovery: list[Any] = []
        self._depth = 0
        self._candidates: dict[int, list[Any]] = {}
        self._root: weakref.ReferenceType[Any] | None = None
        self._primary: weakref.ReferenceType[Any] | None = None
        self._pending_tokens = 0
        self._pending_losses: list[float] = []
        self._orig_backward: Any = None
        self._patched_backward: Any = None
        self._torch: Any = None
        self.params: dict[str, Any] = {}
        self.root_name: str | None = None
        self.example: tuple[Any, Any] | None = None
        self.paused = False  # set while trainmeter itself runs the model (FLOP counting)
        self._forward_patch: tuple[Any, Any, Any] | None = None
        self.autocast_dtype: str | None = None
        self._last_type: Any = None  # the last counted positional batch: type, shape, dtype, tokens
        self._last_shape: Any = None
        self._last_dtype: Any = None
        self._last_tokens = 0

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Install the hooks (torch is imported here, not at package import)."""
        import torch
        from torch.nn.modules import module as nn_module

        self._torch = torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._on_step))
        self._discovery.append(nn_module.register_module_forward_pre_hook(self._on_global_pre))
        self._discovery.append(
            nn_module.register_module_forward_hook(self._on_global_post, with_kwargs=True, always_call=True)
        )
        orig = torch.Tensor.backward
        probes = self

        @functools.wraps(orig)
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if probes._patched_backward is not None:
                probes._on_backward(tensor)
            return orig(tensor, *args, **kwargs)

        self._orig_backward = orig
        self._patched_backward = backward
        torch.Tensor.backward = backward  # type: ignore[method-assign]

    def stop(self) -> None:
        """Remove every hook and restore ``Tensor.backward``. Idempotent."""
        for handle in (*self._handles, *self._discovery):
            try:
                handle.remove()
            except Exception:
                pass
        self._handles.clear()
        self._discovery.clear()
        self._unwrap_forward()
        torch = self._torch
        if torch is not None and self._patched_backward is not None:
            if torch.Tensor.backward is self._patched_backward:
                torch.Tensor.backward = self._orig_backward  # type: ignore[method-assign]
            self._patched_backward = None
        self._candidates.clear()

    # -- discovery -----------------------------------------------------------------
    def _on_global_pre(self, module: Any, args: Any) -> None:
        self._depth += 1

    def _on_global_post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or not module.training or not self._torch.is_grad_enabled():
            return
        try:
            counted = count_batch(args, kwargs)
            entry = self._candidates.get(id(module))
            if entry is None:
                if len(self._candidates) >= MAX_CANDIDATES:
                    return
                entry = self._candidates[id(module)] = [weakref.ref(module), 0, None]
            if counted is not None:
                entry[1] += counted[0]
                entry[2] = counted[1]
        except Exception as exc:
            self._monitor.warn_once("probe-discovery", f"model discovery disabled: {exc!r}")
            self._end_discovery()

    def _end_discovery(self) -> None:
        for handle in self._discovery:
            handle.remove()
        self._discovery.clear()
        self._candidates.clear()

    def _choose_root(self, optimizer: Any) -> int | None:
        """Pick the root among candidates; return its tokens for this step."""
        trained: dict[int, int] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                trained[id(p)] = p.numel()
        best: tuple[int, Any, int, str | None] | None = None
        for ref, tokens, unit in self._candidates.values():
            module = ref()
            if module is None:
                continue
            overlap = sum(trained.get(id(p), 0) for p in module.parameters())
            if overlap and (best is None or overlap > best[0]):
                best = (overlap, module, tokens, unit)
        self.params = {"trained": sum(trained.values()), "optimizer_tensors": len(trained)}
        if best is None:
            return None
        _, module, tokens, unit = best
        self.params["root_total"] = sum(p.numel() for p in module.parameters())
        self.params["root_trainable"] = sum(p.numel() for p in module.parameters() if p.requires_grad)
        self.root_name = type(module).__name__
        self._root = weakref.ref(module)
        self._monitor.set_model(module, unit or "tokens")
        self._wrap_forward(module)
        self._end_discovery()
        return tokens

    def declare_root(self, module: Any) -> None:
        """Use ``module`` as the trained root (``tm.monitor(model=...)``); ends discovery."""
        self._end_discovery()
        self._root = weakref.ref(module)
        self.root_name = type(module).__name__
        self.params = {
            "root_total": sum(p.numel() for p in module.parameters()),
            "root_trainable": sum(p.numel() for p in module.parameters() if p.requires_grad),
        }
        self._monitor.set_model(module, "tokens")
        self._wrap_forward(module)

    # -- per step ------------------------------------------------------------------
    def _wrap_forward(self, module: Any) -> None:
        """Count the root's batches by wrapping its ``forward`` for the run.

        An instance attribute (as Accelerate does for autocast) costs one Python
        call per forward; a module hook would send every call through torch's
        slow ``_call_impl`` path, several microseconds more. ``__wrapped__`` keeps
        ``inspect.signature(model.forward)`` (used by Hugging Face) unchanged.
        """
        inner = module.forward
        previous = module.__dict__.get("forward", _MISSING)
        torch = self._torch
        probes = self

        @functools.wraps(inner)
        def forward(*args: Any, **kwargs: Any) -> Any:
            if module.training and not probes.paused and torch.is_grad_enabled():
                # hot path: a batch like the last counted one counts the same (one shape and dtype read)
                first = args[0] if args and not kwargs else None
                try:
                    same = (type(first) is probes._last_type and first.shape == probes._last_shape
                            and first.dtype is probes._last_dtype)
                except Exception:  # a tensor without a shape (a strided nested tensor): the guarded path says so
                    same = False
                if same:
                    probes._pending_tokens += probes._last_tokens
                else:
                    probes._on_root_call(args, kwargs)
            return inner(*args, **kwargs)

        module.forward = forward
        self._forward_patch = (weakref.ref(module), forward, previous)

    def _unwrap_forward(self) -> None:
        if self._forward_patch is None:
            return
        ref, wrapper, previous = self._forward_patch
        self._forward_patch = None
        module = ref()
        if module is None or module.__dict__.get("forward") is not wrapper:
            return  # gone, or someone wrapped it after us: leave theirs in place
        if previous is _MISSING:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = previous

    def _on_root_call(self, args: Any, kwargs: Any) -> None:
        try:
            if self.example is None:
                self._capture_example(args, kwargs)
            counted = count_batch(args, kwargs)
        except Exception as exc:
            self._monitor.warn_once("probe-tokens", f"token counting disabled: {exc!r}")
            self.paused = True
            return
        if counted is not None:
            self._pending_tokens += counted[0]
            self._monitor.token_unit = counted[1]
        # remember a positional batch's shape: the forward wrapper counts the next ones like it
        # without count_batch (exact: same tensor type, position and shape give the same count)
        first = args[0] if args and not kwargs else None
        if counted is not None and first is not None and hasattr(first, "is_floating_point"):
            self._last_type, self._last_shape, self._last_dtype = type(first), first.shape, first.dtype
            self._last_tokens = counted[0]
        else:
            self._last_type = self._last_shape = self._last_dtype = None

    def _capture_example(self, args: Any, kwargs: Any) -> None:
        """Keep one training batch (for the counted FLOPs) and the autocast dtype."""
        torch = self._torch
        self.example = (args, dict(kwargs or {}))
        try:
            for device in ("cuda", "cpu"):
                if torch.is_autocast_enabled(device):
                    self.autocast_dtype = str(torch.get_autocast_dtype(device))
                    break
        except Exception:
            self.autocast_dtype = None

    def release_example(self) -> None:
        """Drop the kept batch (after the FLOP count).

        An empty example, not ``None``, so the forward wrapper does not capture another.
        """
        self.example = None if self.example is None else ((), {})

    def _on_backward(self, tensor: Any) -> None:
        if self.paused:
            return
        try:
            if tensor.ndim == 0:
                if tensor.is_cpu:  # hot path: host memory, no device to wait for
                    self._pending_losses.append(float(tensor.item()))
                    return
                value = self._monitor.read_scalar(tensor, "__loss__")
                if value is not None:
                    self._pending_losses.append(value)
        except Exception as exc:
            self._monitor.warn_once("probe-loss", f"loss capture disabled: {exc!r}")
            self._patched_backward = None

    def take_losses(self) -> list[float]:
        """Return and clear the losses captured since the last step."""
        losses, self._pending_losses = self._pending_losses, []
        return losses

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            primary = self._primary() if self._primary is not None else None
            if primary is None:
                self._primary = weakref.ref(optimizer)
            elif primary is not optimizer:
                return
            if self._root is None and self._discovery:
                first = self._choose_root(optimizer)
                if first is not None:
                    self._pending_tokens += first
                else:
                    for entry in self._candidates.values():
                        entry[1] = 0
                if first is None and self._monitor.steps + 1 >= DISCOVERY_STEPS:
                    self._monitor.warn_once(
                        "probe-root",
                        "no module holding the optimizer's parameters was called in training mode: "
                        "tokens are not counted (call tm.emit or pass the model to tm.monitor)",
                    )
                    self._end_discovery()
            tokens, self._pending_tokens = self._pending_tokens, 0
            losses = self._pending_losses
            if losses:
                self._pending_losses = []
            self._monitor.on_step(tokens, losses)
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}")
