"""Torch probes: optimizer steps, tokens per step, the trained model, captured loss (docs/spec.md section 2).

Installed for one monitored cell and removed at its end, with no global module hook. The hot path and its bounds:
docs/architecture.md ("Hot path"), tests/core/test_hot_path.py; the parts wired here: docs/architecture.md
(``core/``). Every callback is guarded (a fault warns once and disables that probe) and runs on the training thread.
"""

from __future__ import annotations

import math
import sys
import weakref
from contextlib import suppress
from threading import get_ident
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.batch import SAMPLE_KINDS
from trainmeter.core.discovery import Discovery
from trainmeter.core.explicit_steps import OptimizerSteps
from trainmeter.core.loss_capture import TOKENS_SERIES, LossCapture
from trainmeter.core.patches import Patches
from trainmeter.core.probe_state import NO_ROOT, ProbeState, ProbeThreads, guarded
from trainmeter.core.reachable import _is_lightning_module
from trainmeter.core.root_calls import RootCalls
from trainmeter.core.wrappers import CompileWatch, Wrappers


class TorchProbes:
    """The in-process torch hooks of one run (``monitor``): the owner of their parts (``hot``, the per-call state the
    wrappers close over, with their switches; ``threads``, ``root_calls``, ``discovery``, ``loss``, ``optimizers``,
    ``compile_watch``; ``wrappers``, made at :meth:`start`)."""

    name = "torch"

    def __init__(self, monitor: Any) -> None:
        self._monitor = monitor  # the run (core/monitor.py Monitor)
        self._steps = steps = monitor.steps_state  # the step rule (StepRecorder): every counted step goes there
        self._handles: list[Any] = []
        self._patches = Patches()
        self.hot = hot = ProbeState(self._refresh_fast)
        self.threads = threads = ProbeThreads(hot, monitor)
        self.root_calls = root_calls = RootCalls(hot, steps, monitor)
        self.discovery = discovery = Discovery(hot, steps, monitor, threads, root_calls, self._patches)
        self.loss = loss = LossCapture(hot, monitor, threads)
        self.optimizers = OptimizerSteps(hot, steps, monitor, threads, discovery, loss)
        self.compile_watch = CompileWatch(discovery, hot, self._patches, monitor.warn_once)
        # what the run and the wings call, straight to the part that answers
        self.is_candidate = discovery.is_candidate  # watched as a possible root (any thread)
        self.declare_root = discovery.declare_root  # tm.monitor(model=...)
        self.wrappers: Wrappers | None = None
        # a model trained through a method of its (watch_model's ``through``): its ref, the method, the first
        # training call's (args, kwargs) once kept (empty once counted)
        self._through: tuple[Any, str, tuple[Any, Any] | None] | None = None

    def _refresh_fast(self) -> None:
        """Recompute the hot paths' flags from their inputs (after any of them changed, in any part)."""
        hot, discovery, threads = self.hot, self.discovery, self.threads
        # a second training thread switches the fast paths off (ProbeThreads); the first backward waits for lane 1's
        # thread to be known; a pause silences only the thread that set it (the counted pass may run on the worker)
        paused = hot.paused and (not threads.hot_ident or hot.paused_ident == threads.hot_ident)
        plain = hot.active and not paused and hot.on_training is None and not threads.threaded
        root = discovery.root
        fast = plain and hot.fast_calls and root is not None
        hot.fast_ref = root if fast else NO_ROOT  # type: ignore[assignment]
        # the fast call calls torch's Module._call_impl itself (no bound method, no _compiled_call_impl read) while
        # nothing is compiled in the run and torch.compile is watched: module.compile() goes through it first
        hot.call_impl = discovery.direct_call if fast and not discovery.compiling else None
        hot.fast_backward = (plain and hot.backward_on and self.loss.step_loss is None and self.loss.scaled is None
                             and threads.hot_ident != 0)
        if not plain or root is None:
            hot.steady = False

    def start(self) -> None:
        """Install the hooks (torch is imported here, not at package import)."""
        import torch
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        monitor, hot = self._monitor, self.hot
        self.wrappers = wrappers = Wrappers(torch, hot, self._steps, monitor, self.threads, self.discovery, self.loss,
                                            self.optimizers)
        hot.switch(active=True)
        allow, warn = host_patches.allow, monitor.warn_once  # each host patch checked once, here
        if allow("step-hooks", warn):
            self._handles.append(register_optimizer_step_post_hook(wrappers.step_hook()))
        if allow("backward", warn):
            self._patches.wrap(torch.autograd, "backward", wrappers.backward)
            hot.switch(capture_on=True, backward_on=True)
        self._refresh_fast()
        if allow("optimizer-init", warn):
            self._patches.wrap(Optimizer, "__init__", wrappers.optimizer_init)
        with suppress(Exception):
            from torch.amp.grad_scaler import GradScaler

            if allow("grad-scaler", warn):
                self._patches.wrap(GradScaler, "scale", wrappers.scale)
        call_wrapper = allow("call-wrapper", warn)  # TRAINMETER_DISABLE=call-wrapper (core/host_patches.py)
        compile_watch = allow("compile-watch", warn)
        self.discovery.start(torch, wrappers.call if call_wrapper else None, compile_watch)
        if compile_watch:
            self.compile_watch.install(torch)
        guarded(warn, "probe-discovery", self.discovery.scan, sys._getframe(1))

    def stop(self) -> None:
        """Remove every hook and patch; write the loss and token provenance. Idempotent."""
        self.hot.switch(active=False)
        for handle in self._handles:
            with suppress(Exception):
                handle.remove()
        self._handles.clear()
        self.compile_watch.remove()
        self._patches.restore_all()
        self.discovery.stop()
        self.loss.stop()
        self.hot.switch(on_training=None)
        guarded(self._monitor.warn_once, "probe-info", self._write_info)

    def reset_discovery(self) -> None:
        """Forget the root and the primary optimizer (a forked child may train another model)."""
        hot = self.hot
        hot.new_probe_state()
        hot.backward_on = hot.capture_on
        self.discovery.reset()
        self.optimizers.reset()
        self.threads.reset()  # the child's threads are not the parent's (nor its lock's holder)
        self.loss.reset()
        self.root_calls.reset()
        self._through = None
        self._refresh_fast()

    def _write_info(self) -> None:
        """``series_info`` entries for ``train_loss`` and ``tokens_per_step``."""
        describe = self._monitor.registry.describe
        n = self.loss.write_info(describe, self.steady_steps, self.optimizers.other_numbers())
        discovery, root_calls = self.discovery, self.root_calls
        root_calls.warn_unread()
        if root_calls.declared:  # docs/spec.md section 2, "The batch rule"
            describe(TOKENS_SERIES, {"provenance": "declared", "source": "tm.batch()", "note": ""})
        elif discovery.roots_found or root_calls.framework_counted:
            root = discovery.reader() or discovery.root_name or "the model"
            module = discovery.root() if discovery.root is not None else None
            lightning = "lightning training_step batch" if module is not None and _is_lightning_module(module) else ""
            calls = self.optimizers.max_calls  # the most root calls in a step
            notes = [SAMPLE_KINDS.get(root_calls.kind)]
            if calls > 1 and n["max_parts"] >= calls and n["divided"] and not n["ambiguous"]:
                # a divided backward per call: micro-batches of gradient accumulation
                notes.append(f"up to {calls} micro-batches per step (gradient accumulation); each micro-batch counts")
            elif calls > 1:
                notes.append(f"the model was called up to {calls} times per step; each call's batch "
                             "counts (a GAN's discriminator on real and generated samples counts both)")
            if discovery.first_step_missed:
                notes.append("counted from step 2: the optimizer was built before the run where it could "
                             "not be seen (pass model= to count step 1)")
            unread = root_calls.framework_unread  # the framework's batches the rule could not read
            notes.append(unread and f"where {unread}, the calls of {root} counted the batch")
            source = root_calls.framework_counted or lightning or f"batches of {root} called with gradients enabled"
            describe(TOKENS_SERIES, {"provenance": "counted", "source": source, "note": "; ".join(filter(None, notes))})

    def _pause(self, value: bool) -> None:
        ident = self.threads.hot_ident
        # lane 1's own pause recomputes its fast paths; another thread's leaves them to lane 1's thread
        self.hot.pause(value, refresh=not ident or ident == get_ident())

    paused = property(lambda self: self.hot.paused, _pause, doc="The calls of the thread that set it are not counted "
                      "(our own FLOP count, maybe on the report worker).")
    on_training = property(lambda self: self.hot.on_training, lambda self, fn: self.hot.switch(on_training=fn),
                           doc="Called at each training forward, backward and step while set (Dispatcher's).")
    steady_steps = property(lambda self: self._steps.steps - self.optimizers.general_steps,
                            doc="Lane 1's steps that took the step hook's steady path (their loss read at backward).")
    primary_optimizer = property(lambda self: self.hot.primary_optimizer(),
                                 doc="The primary optimizer (whose steps are counted), or ``None``. Any thread.")

    def add_pre_step_hook(self, fn: Any) -> None:
        """A global optimizer step pre-hook ``fn(optimizer, args, kwargs)`` until the run's end (``nan-checkpoint``)."""
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        if host_patches.allow("nan-checkpoint", self._monitor.warn_once):
            self._handles.append(register_optimizer_step_pre_hook(fn))

    def loss_not_finite(self) -> bool:
        """Whether a part of lane 1's step loss read on the host since the last step is not finite. Lane 1's thread."""
        hot = self.hot
        if hot.fast_parts:
            return not math.isfinite(hot.fast_sum)
        loss = self.loss.step_loss
        return loss is not None and any(v is not None and not math.isfinite(v) for v, _ in loss.parts)

    hot_ident = property(lambda self: self.threads.hot_ident,
                         doc="``threading.get_ident()`` of lane 1's thread, 0 before any training event. Any thread.")

    def lane_one(self) -> tuple[str, str | None, str | None]:
        """Lane 1's thread, root class and optimizer class names (empty or ``None`` when unknown). Any thread."""
        primary = self.hot.primary_optimizer()
        return self.threads.hot_thread, self.discovery.root_name, type(primary).__name__ if primary is not None else None

    params = property(lambda self: self.discovery.run_params(),
                      doc="The model's parameter counts, and ``trained``: its parameters the run's optimizers train.")

    @property
    def example(self) -> tuple[Any, Any] | None:
        """One training batch of the model ``(args, kwargs)`` for the FLOP count, or ``None``; when the model is
        never called itself, the first training call of the method it is trained through (:attr:`example_call`)."""
        if self.discovery.reader() is None:
            return self.root_calls.example
        through = self._through
        model = self.discovery.model
        if through is None or model is None or through[0]() is not model():
            return None
        return through[2]

    example_call = property(
        lambda self: self._through[1] if self.discovery.reader() is not None and self.example is not None else None,
        doc="The method the kept example is a call of, if any.")

    @property
    def example_missing(self) -> str | None:
        """Why no batch of the model is kept for the FLOP count when it is never called itself, else ``None``."""
        reader = self.discovery.reader()
        if reader is None or self.example is not None:
            return None
        return (f"{self.discovery.root_name} is trained without being called itself (through a method of its): no "
                f"pass of it can be counted (its batches are read from the calls of {reader})")

    example_declared = property(lambda self: self.root_calls.example_declared,
                                doc="The kept batch's count where ``tm.batch`` declared it, else empty.")
    autocast_dtype = property(lambda self: self.root_calls.autocast_dtype)
    seq_weights = property(lambda self: self.root_calls.seq_weights,
                           doc="The run's token-weighted S (docs/spec.md section 5, \"S\").")

    @property
    def example_pending(self) -> bool:
        """The root is known and a batch of it will be kept at its next training call (never through a method)."""
        discovery = self.discovery
        return (discovery.root is not None and discovery.root_id in discovery.candidates
                and self.root_calls.example is None and discovery.reader() is None)

    def release_example(self) -> None:
        """Drop the kept batch (after the FLOP count): an empty one, so none other is kept."""
        self.root_calls.release_example()
        if self._through is not None and self._through[2] is not None:
            self._through = (self._through[0], self._through[1], ((), {}))

    def watch_model(self, module: Any, through: str | None = None) -> None:
        """A framework trains ``module`` through a method of its (``through``), never calling it: it and its children
        holding parameters are watched (docs/spec.md section 2, "The model rule"); the method's first training call
        comes to :meth:`keep_call` for the counted FLOPs (section 5). Training thread."""
        discovery = self.discovery
        if discovery.root is None:  # once found, the root stays (another fit of the same model)
            discovery.watch_inside(module, {id(p): p.numel() for p in module.parameters()})
            self._through = (weakref.ref(module), through, None) if through else None

    def keep_call(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A training call of the method :meth:`watch_model` named: the first one's arguments are kept (references)."""
        through = self._through
        if through is not None and through[2] is None and through[0]() is module:
            self._through = (through[0], through[1], (args, dict(kwargs)))

    def framework_batch(self, batch: Any, source: str) -> None:
        """:meth:`RootCalls.framework_batch <trainmeter.core.root_calls.RootCalls.framework_batch>` while active."""
        if self.hot.active:
            self.root_calls.framework_batch(batch, source)
