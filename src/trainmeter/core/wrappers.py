"""The wrappers put over torch: the watched call, ``autograd.backward``, ``GradScaler.scale``, the step hook,
``Optimizer.__init__``, and ``torch.compile`` and ``OptimizedModule.__init__`` (:class:`CompileWatch`: a compiled
model is counted at its wrapper, never in Dynamo). Loss semantics: docs/spec.md section 2; the steady step's cost
(section 20) is bounded by tests/core/test_hot_path.py. The hot ones close over the probes'
:class:`~trainmeter.core.probe_state.ProbeState` and the step rule as locals. Training thread.
"""

from __future__ import annotations

import functools
import sys
from threading import get_ident
from types import ModuleType
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.faults import fault_site
from trainmeter.core.patches import PostImportHooks, take_off_call
from trainmeter.core.probe_state import guarded

_NO_ARG = object()  # the watched call's first argument when it has none

_BACKWARD_PARAMETERS = ("tensors", "grad_tensors", "retain_graph", "create_graph", "grad_variables", "inputs")


def _plain_backward(backward: Any) -> bool:
    """Whether ``backward`` takes torch 2.x's parameters, in order, each positional or keyword."""
    import inspect

    try:
        parameters = list(inspect.signature(backward).parameters.values())
    except (TypeError, ValueError):
        return False
    return (tuple(p.name for p in parameters) == _BACKWARD_PARAMETERS
            and all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters))


def direct_call_impl(module: Any, torch: Any) -> Any:
    """torch's ``Module._call_impl`` when the fast call may call it for ``module`` itself (the class keeps torch's and
    the instance has neither its own ``_call_impl`` nor a ``_compiled_call_impl``), else ``None``. Read once."""
    impl = getattr(torch.nn.Module, "_call_impl", None)
    try:
        if (impl is None or getattr(type(module), "_call_impl", None) is not impl or "_call_impl" in vars(module)
                or getattr(module, "_compiled_call_impl", None) is not None):
            return None
    except Exception:
        return None
    return impl


class Wrappers:
    """The wrapper factories of one run's probes (``Patches.wrap``'s ``make``), over the probes' parts they call."""

    def __init__(self, torch: Any, hot: Any, steps: Any, monitor: Any, threads: Any, discovery: Any, loss: Any,
                 optimizers: Any) -> None:
        self._torch = torch
        self._hot = hot
        self._steps = steps
        self._monitor = monitor
        self._threads = threads
        self._discovery = discovery
        self._loss = loss
        self._optimizers = optimizers

    def step_hook(self) -> Any:
        """The optimizer step post-hook: a steady step (docs/architecture.md, "Hot path") straight to the step rule's
        ``count``, any other through :meth:`~trainmeter.core.explicit_steps.OptimizerSteps.on_step`."""
        hot, rule, monitor, on_step = self._hot, self._steps, self._monitor, self._optimizers.on_step

        def step_hook(optimizer: Any, args: Any, kwargs: Any, /) -> None:
            try:
                primary = hot.primary  # slot reads, then calls: a method call of a slot is not specialized
                if hot.steady and hot.fast_parts == 1 and hot.calls == 1 and primary() is optimizer:
                    # hot.steady is cleared by whatever needs the general path (a StepLoss, a candidate's call, a
                    # new optimizer, an eval span, a pause); one call leaves max_calls as it is
                    tokens = hot.pending_tokens
                    hot.pending_tokens = 0
                    hot.calls = 0
                    hot.fast_parts = 0
                    hot.fast_first = None  # the loss tensor is the loop's again
                    count = rule.count
                    count(tokens, None, hot.fast_sum)
                    return
                if (hot.steady and not hot.calls and not hot.fast_parts and hot.fast_backward
                        and primary() is optimizer):  # an empty step (no forward, no backward): no tokens, no loss
                    rule.count(0, None, None)
                    return
            except Exception as exc:
                monitor.warn_once("probe-step", f"step probe fault: {exc!r}{fault_site(exc)}")
                return
            on_step(optimizer, args, kwargs)

        return step_hook

    def optimizer_init(self, original: Any) -> Any:
        hot, warn, built = self._hot, self._monitor.warn_once, self._discovery.on_optimizer_built

        @functools.wraps(original)
        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if hot.active:
                guarded(warn, "probe-discovery", built, optimizer, sys._getframe(1))

        return __init__

    def call(self, attr: str, original: Any) -> Any:
        """The wrapper of a watched class's ``attr`` (``__call__``, or a LightningModule's ``training_step``)."""
        hot, torch, threads = self._hot, self._torch, self._threads
        on_call, lane_call = self._discovery.on_call, self._lane_call
        # torch.compiler.is_compiling() in one frame: Dynamo folds is_dynamo_compiling() to True when it traces the
        # wrapper; the flag is set while torch.export traces (the public check where it is gone: core/host_patches.py)
        is_dynamo_compiling = torch.compiler.is_dynamo_compiling
        compiler = host_patches.compile_flag_owner(torch.compiler, self._monitor.warn_once)
        is_grad_enabled = torch.is_grad_enabled
        candidates = self._discovery.candidates  # the same dict for the run (Discovery clears it in place)
        lightning = attr == "training_step"
        # a class that keeps torch's __call__ (Module._wrapped_call_impl, which only routes a module.compile()d call):
        # the hot path calls the module's _call_impl itself, one frame (and its argument tuple and dict) fewer
        routed = attr == "__call__" and original is getattr(torch.nn.Module, "_wrapped_call_impl", None)

        # the first positional argument is a positional-only parameter: model(x) builds no argument tuple here
        @functools.wraps(original)
        def call(module: Any, first: Any = _NO_ARG, /, *args: Any, **kwargs: Any) -> Any:
            if is_dynamo_compiling() or compiler._is_compiling_flag:  # a trace sees a pass-through: no guard
                # on our state, no extra graph
                if first is _NO_ARG:
                    return original(module, **kwargs)
                return original(module, first, *args, **kwargs)
            fast_ref = hot.fast_ref  # a slot read, then a call
            if fast_ref() is module and not hot.depth:
                # hot path (docs/spec.md section 20): the root called with a batch like the last counted one counts
                # the same (exact: same type, shape and dtype; no argument: not the last type); anything else takes
                # Discovery.on_call
                if kwargs:  # a keyword-only batch under the last one's token keyword, no token keyword before it
                    key = hot.last_key
                    if key is not None and first is _NO_ARG and not args:
                        batch = kwargs[key] if key in kwargs else None
                        for before in hot.last_before:  # a token keyword before it would be counted instead
                            if before in kwargs:
                                batch = None
                        try:
                            same = (type(batch) is hot.last_type and batch.shape == hot.last_shape
                                    and batch.dtype is hot.last_dtype)
                        except Exception:  # a tensor without a shape (a nested tensor): on_call says so
                            same = False
                        if same and is_grad_enabled():
                            hot.pending_tokens += hot.last_tokens
                            hot.calls += 1
                            hot.depth = 1
                            try:
                                if routed:  # torch's _wrapped_call_impl, inline
                                    call_impl = hot.call_impl
                                    if call_impl is not None:
                                        return call_impl(module, **kwargs)
                                    if module._compiled_call_impl is None:
                                        return module._call_impl(**kwargs)
                                return original(module, **kwargs)
                            finally:
                                hot.depth = 0
                else:
                    try:
                        same = (type(first) is hot.last_type and first.shape == hot.last_shape
                                and first.dtype is hot.last_dtype)
                    except Exception:  # a tensor without a shape (a nested tensor): on_call says so
                        same = False
                    if same and is_grad_enabled():
                        hot.pending_tokens += hot.last_tokens
                        hot.calls += 1
                        hot.depth = 1
                        try:
                            if args:
                                return original(module, first, *args)
                            if routed:  # torch's _wrapped_call_impl, inline
                                call_impl = hot.call_impl  # Module._call_impl while nothing is compiled (_refresh_fast)
                                if call_impl is not None:
                                    return call_impl(module, first)
                                if module._compiled_call_impl is None:
                                    return module._call_impl(first)
                            return original(module, first)
                        finally:
                            hot.depth = 0
            if first is not _NO_ARG:
                args = (first, *args)
            if ((hot.depth and not threads.threaded and get_ident() == threads.hot_ident)  # inside the root's call
                    or id(module) not in candidates or not hot.active):
                return original(module, *args, **kwargs)
            if threads.threaded or ((lightning or is_grad_enabled()) and threads.thread_lane() is not None):
                # several training threads: per-thread nesting and counts (core/probe_state.py ProbeThreads)
                return lane_call(original, module, args, kwargs, lightning)
            if hot.depth:
                return original(module, *args, **kwargs)
            hot.depth += 1
            try:
                on_call(module, args, kwargs, lightning)
                return original(module, *args, **kwargs)
            finally:
                hot.depth -= 1

        return call

    def scale(self, original: Any) -> Any:
        """The wrapper of ``GradScaler.scale``: the loss it returns and its scale are kept for its backward."""
        hot, loss = self._hot, self._loss

        @functools.wraps(original)
        def scale(scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(scaler, outputs, *args, **kwargs)
            if hot.active and out is not outputs and getattr(out, "ndim", None) == 0:
                try:
                    loss.note_scaled(out, scaler._scale, outputs)
                except Exception:
                    loss.scaled = None
            return out

        return scale

    def backward(self, original: Any) -> Any:
        """The wrapper of ``torch.autograd.backward``: the 0-d loss read without a sync."""
        if not _plain_backward(original):
            return self._any_backward(original)
        hot, tensor_type = self._hot, self._torch.Tensor
        loss, general = self._loss, self._general_backward

        # torch.autograd.backward's own parameters, passed on positionally: no tuple or dict is built per call
        @functools.wraps(original)
        def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None, create_graph: bool = False,
                     grad_variables: Any = None, inputs: Any = None) -> Any:
            if (hot.fast_backward and grad_tensors is None and type(tensors) is tensor_type and not hot.in_backward
                    and tensors.ndim == 0 and tensors.is_cpu):
                # hot path (docs/spec.md section 20): a 0-d CPU loss (host memory, no device to wait for), unscaled,
                # read at once and summed in place; its grad_fn is read only if a second part comes (fast_backward
                # holds only while capture is on: TorchProbes._refresh_fast)
                hot.in_backward = True
                try:
                    try:
                        # Tensor.tolist() gives a 0-d tensor's value as item() does (the same Python number), without
                        # item()'s release and retake of the GIL: no hand-off to a waiting thread at every step
                        value = tensors.tolist()
                        if hot.fast_parts:  # a second part: division matters (accumulation or not)
                            loss.fast_division(tensors)
                            hot.fast_sum += value
                            hot.fast_parts += 1
                        else:
                            hot.fast_first = tensors  # held until the step (see LossCapture.fast_division)
                            hot.fast_sum = value
                            hot.fast_parts = 1
                    except Exception as exc:
                        loss.fault(exc)
                    return original(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
                finally:
                    hot.in_backward = False
            return general(original, tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)

        return backward

    def _any_backward(self, original: Any) -> Any:  # a backward whose parameters differ from torch 2.x's
        general = self._general_backward

        @functools.wraps(original)
        def backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            return general(original, tensors, grad_tensors, *args, **kwargs)

        return backward

    def _general_backward(self, original: Any, tensors: Any, grad_tensors: Any, *args: Any, **kwargs: Any) -> Any:
        """The backward wrapper's general path: the loss parts read by :meth:`LossCapture.on_backward`; a nested
        backward, capture off, or training in several threads: the calling thread's lane's, if any."""
        hot, read = self._hot, self._loss.on_backward
        if not hot.in_backward and hot.backward_on:
            state, ident = hot, get_ident()
        else:
            lane = self._threads.current() if hot.capture_on and not kwargs else None
            if lane is None or lane.in_backward:
                return original(tensors, grad_tensors, *args, **kwargs)
            state, ident = lane, lane.ident
            if not lane.hot:
                read = functools.partial(self._threads.lane_backward, lane)
        state.in_backward = True
        try:
            if grad_tensors is None and not hot.paused_in(ident):
                read(tensors)  # not our own pass's (the thread that paused the probes)
            return original(tensors, grad_tensors, *args, **kwargs)
        finally:
            state.in_backward = False

    def _lane_call(self, original: Any, module: Any, args: Any, kwargs: Any, lightning: bool) -> Any:
        """A watched module's call in threaded mode: the outermost call per thread counts."""
        lane = self._threads.thread_state()
        if lane.depth:
            return original(module, *args, **kwargs)
        lane.depth += 1
        try:
            discovery = self._discovery
            if lane.hot:
                discovery.on_call(module, args, kwargs, lightning)
            elif discovery.is_candidate(module) and (lightning or self._torch.is_grad_enabled()):
                self._threads.lane_call(lane, module, args, kwargs, lightning)  # a training call in another lane
            return original(module, *args, **kwargs)
        finally:
            lane.depth -= 1


class CompileWatch:
    """``torch.compile`` and ``OptimizedModule`` seen during the run: ``discovery`` told. Training thread."""

    def __init__(self, discovery: Any, hot: Any, patches: Any, warn: Any) -> None:
        self._discovery = discovery
        self._hot = hot
        self._patches = patches
        self._warn = warn
        self._imports: PostImportHooks | None = None

    def install(self, torch: Any) -> None:
        """Wrap ``torch.compile`` and, once ``torch._dynamo.eval_frame`` is imported, ``OptimizedModule.__init__``."""
        self._patches.wrap(torch, "compile", self._make_compile)
        self._imports = PostImportHooks({"torch._dynamo.eval_frame": self._patch_dynamo})
        self._imports.install()

    def remove(self) -> None:
        """Stop watching imports (the patches are restored with the run's). Idempotent."""
        if self._imports is not None:
            self._imports.remove()
            self._imports = None

    def _compiling(self) -> None:
        """Something is compiled in the run: discovery told once (while the run is active)."""
        if self._hot.active and not self._discovery.compiling:
            guarded(self._warn, "probe-discovery", self._discovery.on_compiling)

    def _make_compile(self, original: Any) -> Any:
        compiling = self._compiling

        @functools.wraps(original)
        def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 (torch.compile's own name)
            compiling()
            return original(*args, **kwargs)

        return compile

    def _patch_dynamo(self, module: ModuleType) -> None:
        """``torch.compile(model)`` during the run: count at the compiled wrapper, never inside Dynamo."""
        owner = getattr(module, "OptimizedModule", None)
        if self._hot.active and isinstance(owner, type):
            self._patches.wrap(owner, "__init__", self._make_compiled_init)

    def _make_compiled_init(self, original: Any) -> Any:
        discovery, hot, warn, compiling = self._discovery, self._hot, self._warn, self._compiling

        @functools.wraps(original)
        def __init__(compiled: Any, mod: Any, *args: Any, **kwargs: Any) -> None:
            watched = hot.active and discovery.knows(mod)
            compiling()
            if not watched:
                return original(compiled, mod, *args, **kwargs)
            # The wrapper binds ``mod.__call__`` for Dynamo to trace: let it bind torch's own, not ours.
            cls = type(mod)
            ours = take_off_call(cls)
            try:
                original(compiled, mod, *args, **kwargs)
            finally:
                if ours is not None:
                    cls.__call__ = ours
            guarded(warn, "probe-discovery", discovery.watch, compiled)
            guarded(warn, "probe-discovery", discovery.unwatch, mod)

        return __init__
