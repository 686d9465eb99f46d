"""Torch probes: optimizer steps, tokens per step, the trained model, captured loss.

Installed for one monitored cell and removed at its end, without any global
module hook (those make Dynamo compile the model again, print torch's
"global hooks" warning and leave an entry in torch's hook dicts):

- a global optimizer step post-hook counts steps of the *primary* optimizer
  (the first that steps; a newer optimizer replaces it once it steps, as in a
  sweep that re-creates model and optimizer);
- the trained model is found from the optimizers' parameters: at the start and
  whenever an optimizer is constructed (``torch.optim.Optimizer.__init__`` is
  wrapped), the modules reachable from the calling frames (their locals, the
  attributes of the objects there, ``__main__``) that hold its parameters become
  *candidates*; at the primary optimizer's first step the outermost called one
  holding most of its parameters becomes the *root*;
- candidates' batches are read by wrapping ``__call__`` on their *class* (or
  ``training_step`` for a Lightning module), which acts only for the watched
  instances: the module's ``__dict__`` is never touched, so ``copy.deepcopy``,
  ``pickle`` and ``torch.save(model)`` carry nothing of ours and a copy computes
  with its own weights; under Dynamo tracing the wrapper is a plain pass-through;
- ``torch.autograd.backward`` (also behind ``Tensor.backward``) is wrapped to read
  the 0-d loss without a sync, and ``GradScaler.scale`` to know the scale that
  multiplied it (read with the loss, divided out on the host).

Loss semantics (docs/spec.md §2): the step's loss is the sum of the values passed
to backward since the previous optimizer step, each divided by the GradScaler scale
that multiplied it: the loss whose gradient the step applied. When the loop divided
each micro-batch loss by the accumulation count, that sum is the per-step loss.
Several backward calls without a division are recorded as their sum and marked
``ambiguous`` in ``series_info``. Losses before the step of a non-primary
optimizer go to ``train_loss.optimizerN``.

Hot path (issue 12, ``tests/core/test_hot_path.py``): in steady state a step costs the
root's ``__call__`` wrapper (a positional batch with the type, shape and dtype of the
last counted one counts the same, without ``count_batch``), the ``backward`` wrapper (torch's
own six parameters, so no tuple or dict per call; a 0-d CPU loss, not scaled, is read with
``item()`` and kept in place: no :class:`StepLoss` object, and its ``grad_fn`` is read only
when a second part comes before the step), the step hook and ``Monitor.on_step_read``. Anything
else (a CUDA loss, a GradScaler, an open eval span, a new shape, a second call of the root in a
step, a new optimizer) takes the general path.

Every callback is guarded: a fault warns once and disables that probe.
Callbacks run on the training thread.
"""

from __future__ import annotations

import functools
import sys
import weakref
from types import ModuleType
from typing import Any, Protocol

from trainmeter.core import host_patches
from trainmeter.core.batch import count_batch
from trainmeter.core.patches import ORIGINAL_ATTR, Patches, PostImportHooks
from trainmeter.core.scalars import StepLoss

LOSS_SERIES = "train_loss"
TOKENS_SERIES = "tokens_per_step"
MAX_CANDIDATES = 64
MAX_FRAMES = 48
MAX_ATTRS = 256
MAX_NAMES = 4096  # names looked at per namespace (a long notebook's user namespace)
_PLAIN = (str, bytes, int, float, bool, type(None))
DISCOVERY_STEPS = 20


class StepSink(Protocol):
    """What the probes call on the run (:class:`~trainmeter.core.monitor.Monitor`). Training thread."""

    steps: int
    token_unit: str
    series_info: dict[str, dict[str, Any]]

    def on_step(self, tokens: int, loss: StepLoss | None = None, *, loss_value: float | None = None) -> None: ...

    def on_step_read(self, tokens: int, loss_value: float) -> None: ...

    def add_loss(self, loss: StepLoss, t_s: float | None = None) -> None: ...

    def set_model(self, module: Any, token_unit: str) -> None: ...

    def warn_once(self, key: str, message: str) -> None: ...

    @property
    def scalar_reader(self) -> Any: ...


def _is_lightning_module(module: Any) -> bool:
    return any(cls.__name__ == "LightningModule" for cls in type(module).__mro__)


def _notebook_namespace() -> dict[str, Any]:
    """The IPython user namespace (the notebook's globals), or an empty dict."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        namespace = getattr(shell, "user_ns", None)
    except Exception:
        return {}
    return namespace if isinstance(namespace, dict) else {}


def _instance(value: Any, kind: Any) -> bool:
    """``isinstance`` that never raises (a proxy whose ``__class__`` lookup fails is no match)."""
    try:
        return isinstance(value, kind)
    except Exception:
        return False


def _torch_class(cls: type) -> bool:
    """A torch building block (``nn.Sequential``, ``nn.Linear``): also used inside compiled models."""
    return cls.__module__.startswith("torch.") and cls.__name__ != "OptimizedModule"


def _is_compiled(module: Any) -> bool:
    return type(module).__name__ == "OptimizedModule" and "_orig_mod" in getattr(module, "_modules", {})


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


def _divided(grad_fn: Any) -> bool:
    """Whether a loss was divided last (``loss / k``: a ``DivBackward`` node)."""
    return grad_fn is not None and type(grad_fn).__name__.startswith("DivBackward")


class _Candidate:
    __slots__ = ("ref", "tokens", "unit", "calls", "example", "lightning")

    def __init__(self, module: Any) -> None:
        self.ref = weakref.ref(module)
        self.tokens = 0
        self.unit: str | None = None
        self.calls = 0
        self.example: tuple[Any, Any, str | None] | None = None  # first batch seen (args, kwargs, autocast)
        self.lightning = _is_lightning_module(module)


class TorchProbes:
    """The in-process torch hooks of one run.

    Args:
        monitor: The run they report to.

    Attributes:
        on_training: Called (no arguments) at each training forward of the root, each
            backward and each optimizer step while set; the time split sets it while an
            eval span is open (so it needs no optimizer hook of its own).
        paused: Set while trainmeter itself runs the model (FLOP counting).
    """

    name = "torch"

    def __init__(self, monitor: StepSink) -> None:
        self._monitor = monitor
        self._handles: list[Any] = []
        self._patches = Patches()
        self._imports: PostImportHooks | None = None
        self._call_wrapper_on = True  # TRAINMETER_DISABLE=call-wrapper (core/host_patches.py), read at start
        self._active = False
        self._torch: Any = None
        self._module_type: Any = None
        self._optimizer_type: Any = None
        self._candidates: dict[int, _Candidate] = {}
        self._patched_classes: set[tuple[type, str]] = set()
        self._depth = 0  # nesting of watched calls (the outermost one counts)
        self._root: weakref.ReferenceType[Any] | None = None
        self._declared: weakref.ReferenceType[Any] | None = None  # tm.monitor(model=...)
        self._root_id = 0
        self._primary: weakref.ReferenceType[Any] | None = None
        self._primary_last_event = 0
        self._events = 0
        self._created: dict[int, tuple[weakref.ReferenceType[Any], int]] = {}  # optimizer id -> (ref, event)
        self._others: dict[int, int] = {}  # non-primary optimizer id -> its number (2, 3, ...)
        self._pending_tokens = 0
        self._calls = 0
        self._max_calls = 0
        self._loss: StepLoss | None = None
        self._scaled: tuple[Any, Any, bool] | None = None  # (weakref to the scaled loss, scale tensor, divided)
        self._in_backward = False
        self._backward_on = False
        self._losses_info = {"steps": 0, "ambiguous": 0, "divided": 0, "scaled": 0, "max_parts": 0}
        self._first_step_missed = False
        self._roots_found = 0
        self._candidate_calls = False
        self._gave_up = False
        self._compiling = False  # something is or was compiled: torch's own classes are not patched
        self._set_aside: set[int] = set()  # candidates unwatched for that reason
        self._on_training: Any = None
        # the hot paths' flags, recomputed by _refresh_fast whenever one of their inputs changes:
        # the root's id while its positional batches are counted like the last one (else 0),
        # whether a 0-d CPU loss may be read at backward, and whether a step may take the short path
        self._fast_root = 0
        self._fast_backward = False
        self._steady = False
        # the last counted positional batch of the root (the call wrapper's fast path): type, shape, dtype, count
        self._fast_calls = False
        self._last_type: Any = None
        self._last_shape: Any = None
        self._last_dtype: Any = None
        self._last_tokens = 0
        # the step's loss while every part was a 0-d CPU tensor read at once (the backward fast path)
        self._fast_parts = 0
        self._fast_sum = 0.0
        self._fast_divided = True  # every part after the first was divided (folded in from the second part on)
        # the first part's loss tensor, held from its backward to the step (or the second part, which reads its
        # grad_fn): a single-part step never reads a grad_fn
        self._fast_first: Any = None
        self._fast_steps = 0  # steps whose loss was read on the fast paths (added to _losses_info["steps"])
        self.params: dict[str, Any] = {}
        self.root_name: str | None = None
        self.example: tuple[Any, Any] | None = None
        self._paused = False
        self.autocast_dtype: str | None = None

    # -- the hot paths' flags ----------------------------------------------------------
    @property
    def paused(self) -> bool:
        """Forward and backward calls are not counted (our own FLOP count; a probe fault). Training thread."""
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self._refresh_fast()

    @property
    def on_training(self) -> Any:
        """Called at each training forward, backward and step while set (an open eval span). Training thread."""
        return self._on_training

    @on_training.setter
    def on_training(self, value: Any) -> None:
        self._on_training = value
        self._refresh_fast()

    def _refresh_fast(self) -> None:
        """Recompute the hot paths' flags from their inputs (after any of them changed)."""
        plain = self._active and not self._paused and self._on_training is None
        self._fast_root = self._root_id if plain and self._fast_calls else 0
        self._fast_backward = plain and self._backward_on and self._loss is None and self._scaled is None
        if not plain or self._root is None:
            self._steady = False

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Install the hooks (torch is imported here, not at package import)."""
        import torch
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        self._torch = torch
        self._module_type = torch.nn.Module
        self._optimizer_type = Optimizer
        self._active = True
        allow, warn = host_patches.allow, self._monitor.warn_once  # each host patch checked once, here
        if allow("step-hooks", warn):
            self._handles.append(register_optimizer_step_post_hook(self._on_step))
        if allow("backward", warn):
            self._patches.wrap(torch.autograd, "backward", self._make_backward)
            self._backward_on = True
        self._refresh_fast()
        if allow("optimizer-init", warn):
            self._patches.wrap(Optimizer, "__init__", self._make_optimizer_init)
        try:
            from torch.amp.grad_scaler import GradScaler

            if allow("grad-scaler", warn):
                self._patches.wrap(GradScaler, "scale", self._make_scale)
        except Exception:
            pass
        self._call_wrapper_on = allow("call-wrapper", warn)
        if allow("compile-watch", warn):
            self._patches.wrap(torch, "compile", self._make_compile)
            self._imports = PostImportHooks({"torch._dynamo.eval_frame": self._patch_dynamo})
            self._imports.install()
        self._guarded("probe-discovery", self._scan_existing, sys._getframe(1))

    def stop(self) -> None:
        """Remove every hook and patch; write the loss and token provenance. Idempotent."""
        self._active = False
        self._refresh_fast()
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:
                pass
        self._handles.clear()
        if self._imports is not None:
            self._imports.remove()
            self._imports = None
        self._patches.restore_all()
        self._patched_classes.clear()
        self._candidates.clear()
        self._set_aside.clear()
        self._created.clear()
        self._scaled = None
        self._loss = None
        self._clear_fast_loss()
        self.on_training = None
        self._guarded("probe-info", self._write_info)

    def reset_discovery(self) -> None:
        """Forget the root and the primary optimizer (a forked child may train another model). Training thread."""
        self._primary = None
        self._root = None
        self._root_id = 0
        self._steady = False
        self._refresh_fast()
        self._gave_up = False
        self._others.clear()
        self._pending_tokens = 0
        self._calls = 0
        self._loss = None
        self._clear_fast_loss()
        self._scaled = None
        self.params = {}
        self.root_name = None
        self.example = None
        for candidate in self._candidates.values():
            candidate.tokens = candidate.calls = 0
            candidate.example = None
        self._refresh_fast()

    def _guarded(self, key: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            self._monitor.warn_once(key, f"{key} disabled: {exc!r}")
            return None

    # -- discovery -----------------------------------------------------------------
    def _reachable(self, frame: Any) -> list[Any]:
        """Objects one step from the calling frames: locals, their attributes and list items, ``__main__``."""
        found: dict[int, Any] = {}

        def add(value: Any) -> None:
            if len(found) < 4096:
                found.setdefault(id(value), value)

        namespaces: list[Any] = []
        depth = 0
        while frame is not None and depth < MAX_FRAMES:
            if not frame.f_globals.get("__name__", "").startswith("trainmeter"):
                namespaces.append(frame.f_locals)
            frame = frame.f_back
            depth += 1
        main = sys.modules.get("__main__")
        if main is not None:
            namespaces.append(vars(main))
        namespaces.append(_notebook_namespace())
        for namespace in namespaces:
            for value in list(namespace.values())[:MAX_NAMES]:
                if type(value) in _PLAIN:
                    continue
                try:
                    add(value)
                    if type(value) in (list, tuple):
                        for item in value[:16]:
                            add(item)
                    elif not isinstance(value, (type, self._module_type, ModuleType)):
                        attrs = object.__getattribute__(value, "__dict__")
                        if type(attrs) is dict and len(attrs) <= MAX_ATTRS:
                            for item in list(attrs.values()):
                                add(item)
                                if type(item) in (list, tuple):
                                    for inner in item[:16]:
                                        add(inner)
                except Exception:
                    continue  # no __dict__, or an object that refuses to be looked at
        return list(found.values())

    def _scan_existing(self, frame: Any) -> None:
        """At the start: optimizers already built (an earlier cell) name their modules."""
        objects = self._reachable(frame)
        modules = [o for o in objects if _instance(o, self._module_type)]
        for optimizer in objects:
            if _instance(optimizer, self._optimizer_type):
                self._watch_owners(optimizer, modules)
        if any(_is_compiled(c.ref()) for c in self._candidates.values()):
            self._on_compiling()  # a compiled model is about to be trained

    def _make_optimizer_init(self, original: Any) -> Any:
        probes = self

        @functools.wraps(original)
        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if probes._active:
                probes._guarded("probe-discovery", probes._on_optimizer_built, optimizer, sys._getframe(1))

        return __init__

    def _on_optimizer_built(self, optimizer: Any, frame: Any) -> None:
        self._events += 1
        self._created[id(optimizer)] = (weakref.ref(optimizer), self._events)
        self._steady = False  # the primary's next step marks its event (see _is_newer) on the general path
        modules = [o for o in self._reachable(frame) if _instance(o, self._module_type)]
        self._watch_owners(optimizer, modules)

    @staticmethod
    def _trained(optimizer: Any) -> dict[int, int]:
        trained: dict[int, int] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                trained[id(p)] = p.numel()
        return trained

    def _watch_owners(self, optimizer: Any, modules: list[Any], force: bool = False) -> None:
        """Watch the modules among ``modules`` that hold parameters of ``optimizer``.

        A module compiled with ``torch.compile`` is watched through its wrapper only:
        Dynamo guards on the class of what it traces, so that class is never patched.
        """
        trained = self._trained(optimizer)
        compiled = {id(m._orig_mod) for m in modules if _is_compiled(m)}
        for module in modules:
            if id(module) in compiled:
                continue
            if len(self._candidates) >= MAX_CANDIDATES:
                return
            if id(module) in self._candidates:
                continue
            if any(id(p) in trained for p in module.parameters()):
                self._watch(module, force)

    def _watch(self, module: Any, force: bool = False) -> None:
        cls = type(module)
        if self._compiling and not force and _torch_class(cls):
            # Dynamo guards on the class dicts of what it traces: torch's own classes stay untouched,
            # and a compiled wrapper made of this module is watched instead
            self._set_aside.add(id(module))
            return
        self._candidates[id(module)] = _Candidate(module)
        attr = "training_step" if _is_lightning_module(module) else "__call__"
        if (cls, attr) not in self._patched_classes and self._call_wrapper_on:
            self._patched_classes.add((cls, attr))
            self._patches.wrap(cls, attr, functools.partial(self._make_call, attr))

    def _make_compile(self, original: Any) -> Any:
        probes = self

        @functools.wraps(original)
        def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 (torch.compile's own name)
            if probes._active and not probes._compiling:
                probes._guarded("probe-discovery", probes._on_compiling)
            return original(*args, **kwargs)

        return compile

    def _on_compiling(self) -> None:
        """Something is compiled in this run: take the wrappers off torch's own module classes."""
        self._compiling = True
        for candidate in list(self._candidates.values()):
            module = candidate.ref()
            if module is not None and _torch_class(type(module)):
                self._set_aside.add(id(module))  # its compiled wrapper, if one is made now, is watched instead
                self._unwatch(module)

    def _patch_dynamo(self, module: ModuleType) -> None:
        """``torch.compile(model)`` during the run: count at the compiled wrapper, never inside Dynamo."""
        owner = getattr(module, "OptimizedModule", None)
        if self._active and isinstance(owner, type):
            self._patches.wrap(owner, "__init__", self._make_compiled_init)

    def _make_compiled_init(self, original: Any) -> Any:
        probes = self

        @functools.wraps(original)
        def __init__(compiled: Any, mod: Any, *args: Any, **kwargs: Any) -> None:
            watched = probes._active and (id(mod) in probes._candidates or id(mod) in probes._set_aside)
            if probes._active and not probes._compiling:
                probes._guarded("probe-discovery", probes._on_compiling)
            if not watched:
                return original(compiled, mod, *args, **kwargs)
            # The wrapper binds ``mod.__call__`` for Dynamo to trace: let it bind torch's own, not ours.
            cls = type(mod)
            ours = vars(cls).get("__call__")
            own = getattr(ours, ORIGINAL_ATTR, None)
            try:
                if own is not None:
                    delattr(cls, "__call__")
                    if cls.__call__ is not own:
                        cls.__call__ = own
                original(compiled, mod, *args, **kwargs)
            finally:
                if own is not None:
                    cls.__call__ = ours
            probes._guarded("probe-discovery", probes._watch, compiled)
            probes._guarded("probe-discovery", probes._unwatch, mod)

        return __init__

    def _unwatch(self, module: Any) -> None:
        """Stop watching ``module``; put its class back when no other watched instance needs the patch."""
        self._candidates.pop(id(module), None)
        self._unpatch_class(type(module))

    def _unpatch_class(self, cls: type) -> None:
        """Put ``cls.__call__`` back when no watched instance needs the patch."""
        if (cls, "__call__") not in self._patched_classes:
            return
        if any(type(c.ref()) is cls for c in self._candidates.values()):
            return
        self._patched_classes.discard((cls, "__call__"))
        ours = vars(cls).get("__call__")
        own = getattr(ours, ORIGINAL_ATTR, None)
        if own is None:
            return
        delattr(cls, "__call__")
        if cls.__call__ is not own:
            cls.__call__ = own

    def _make_call(self, attr: str, original: Any) -> Any:
        probes = self
        torch = self._torch
        # torch.compiler.is_compiling() in one frame: Dynamo folds is_dynamo_compiling() to True when it traces
        # the wrapper (so the flag is never read there); the flag is set while torch.export traces. Where torch
        # has no such flag, the public check stands in, resolved here and never on the call (core/host_patches.py)
        is_dynamo_compiling = torch.compiler.is_dynamo_compiling
        compiler = host_patches.compile_flag_owner(torch.compiler, probes._monitor.warn_once)
        is_grad_enabled = torch.is_grad_enabled
        candidates = self._candidates
        lightning = attr == "training_step"

        @functools.wraps(original)
        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            if is_dynamo_compiling() or compiler._is_compiling_flag:  # a trace sees a pass-through: no guard
                # on our state, no extra graph
                return original(module, *args, **kwargs)
            key = id(module)
            if key == probes._fast_root and args and not kwargs and not probes._depth:
                # hot path (issue 12): the root called with a positional batch like the last counted one
                # counts the same (exact: same type, shape and dtype); anything else takes _on_call
                first = args[0]
                try:
                    same = (type(first) is probes._last_type and first.shape == probes._last_shape
                            and first.dtype is probes._last_dtype)
                except Exception:  # a tensor without a shape (a nested tensor): _on_call says so
                    same = False
                if same and is_grad_enabled():
                    probes._pending_tokens += probes._last_tokens
                    probes._calls += 1
                    probes._depth = 1
                    try:
                        if len(args) == 1:  # model(x): a plain call, which CPython 3.11 runs without a C frame
                            return original(module, first)
                        return original(module, *args)
                    finally:
                        probes._depth = 0
            if key not in candidates or not probes._active or probes._depth:
                return original(module, *args, **kwargs)
            probes._depth += 1
            try:
                probes._on_call(module, args, kwargs, lightning)
                return original(module, *args, **kwargs)
            finally:
                probes._depth -= 1

        return call

    def _on_call(self, module: Any, args: Any, kwargs: Any, lightning: bool) -> None:
        if self._paused or not (lightning or self._torch.is_grad_enabled()):
            return
        candidate = self._candidates.get(id(module))
        if candidate is None or candidate.ref() is not module:
            return
        try:
            counted = count_batch(args[:1] if lightning else args, kwargs)
            if id(module) == self._root_id:
                if self.example is None and not lightning:  # a training_step batch is no forward input
                    self._capture_example(args, kwargs)
                if counted is not None:
                    self._pending_tokens += counted[0]
                    self._monitor.token_unit = counted[1]
                # remember a positional batch's shape: the call wrapper counts the next ones like it
                first = args[0] if args and not kwargs else None
                if not lightning and counted is not None and hasattr(first, "is_floating_point"):
                    self._last_type, self._last_shape, self._last_dtype = type(first), first.shape, first.dtype
                    self._last_tokens = counted[0]
                    self._fast_calls = self.example is not None
                else:
                    self._fast_calls = False
                self._refresh_fast()
                self._calls += 1
                callback = self._on_training
                if callback is not None and (lightning or module.training):
                    callback()
            else:
                self._candidate_calls = True
                self._steady = False
                candidate.calls += 1
                if candidate.example is None and not lightning and self._root is None:
                    candidate.example = (args, dict(kwargs or {}), self._autocast())
                if counted is not None:
                    candidate.tokens += counted[0]
                    candidate.unit = counted[1]
        except Exception as exc:
            self._monitor.warn_once("probe-tokens", f"token counting disabled: {exc!r}")
            self.paused = True

    def _choose_root(self, optimizer: Any, frame: Any) -> bool:
        """Pick the root for ``optimizer``; credit its batches of this step. Returns whether found."""
        trained = self._trained(optimizer)
        self.params = {"trained": sum(trained.values()), "optimizer_tensors": len(trained)}
        called = [c for c in self._candidates.values() if c.calls and c.ref() is not None]
        late = False
        if not called:  # the optimizer was not seen being built: look around the step's caller
            before = set(self._candidates)
            modules = [o for o in self._reachable(frame) if _instance(o, self._module_type)]
            self._watch_owners(optimizer, modules, force=True)  # counting beats a possible recompile here
            called = [self._candidates[k] for k in self._candidates if k not in before]
            called = [c for c in called if c.ref() is not None]
            late = True
        best: tuple[int, int, Any, _Candidate] | None = None
        for candidate in called:
            module = candidate.ref()
            overlap = sum(trained.get(id(p), 0) for p in module.parameters())
            size = sum(1 for _ in module.modules())
            if overlap and (best is None or (overlap, size) > best[:2]):
                best = (overlap, size, module, candidate)
        if best is None:
            return False
        _, _, module, candidate = best
        self._set_root(module)
        self.params.update(trained=sum(trained.values()), optimizer_tensors=len(trained))
        if late:
            self._first_step_missed = self._monitor.steps == 0
        else:
            self._pending_tokens += candidate.tokens
            self._calls += candidate.calls
            if candidate.unit:
                self._monitor.token_unit = candidate.unit
            if candidate.example is not None:
                self.example = candidate.example[:2]
                self.autocast_dtype = candidate.example[2]
        for other in self._candidates.values():
            other.example = None
        self._drop_others()
        return True

    def _drop_others(self) -> None:
        """Stop watching every candidate but the root (issue 12): once the root is known, the other modules'
        calls (an old model left in the notebook's namespace, a submodule held by a name) need no wrapper.
        A model built later for a new optimizer is watched again when that optimizer is built. Not once
        something is compiled: Dynamo guards on the class dicts it traced, and a class put back would recompile."""
        if self._compiling:
            return
        root_id = self._root_id
        for key in [k for k in self._candidates if k != root_id]:
            del self._candidates[key]
        for cls, attr in list(self._patched_classes):
            if attr == "__call__":
                self._unpatch_class(cls)

    def _set_root(self, module: Any) -> None:
        if id(module) not in self._candidates:
            self._watch(module, force=True)
        self._root = weakref.ref(module)
        self._root_id = id(module)
        self._fast_calls = False
        self._steady = False
        self._refresh_fast()
        self._roots_found += 1
        self.root_name = type(module).__name__
        self.params = {}
        self.params["root_total"] = sum(p.numel() for p in module.parameters())
        self.params["root_trainable"] = sum(p.numel() for p in module.parameters() if p.requires_grad)
        self.example = None
        self.autocast_dtype = None
        self._monitor.set_model(module, self._monitor.token_unit)

    def is_candidate(self, module: Any) -> bool:
        """Whether ``module`` is watched as a possible root (before the root is known). Any thread."""
        candidate = self._candidates.get(id(module))
        return candidate is not None and candidate.ref() is module

    def declare_root(self, module: Any) -> None:
        """Use ``module`` as the trained root (``tm.monitor(model=...)``)."""
        self._declared = weakref.ref(module)
        self._set_root(module)

    def _no_root_message(self) -> str:
        """The warning when no root was found after DISCOVERY_STEPS steps: what was missing, and what to do."""
        declared = self._declared() if self._declared is not None else None
        if declared is not None:
            return (f"the model passed as model= ({type(declared).__name__}) was never seen called with gradients "
                    "enabled: tokens are not counted (a model called only inside a torch.compile'd function is "
                    "seen by Dynamo alone: compile the model itself, torch.compile(model), to have its batches "
                    "counted)")
        return ("no module holding the optimizer's parameters was seen called: tokens are not counted (pass the "
                "model to tm.monitor(model=...); a model called only inside a torch.compile'd function is seen by "
                "Dynamo alone: compile the model itself, torch.compile(model), to have its batches counted)")

    # -- per call ------------------------------------------------------------------
    def _capture_example(self, args: Any, kwargs: Any) -> None:
        """Keep one training batch (for the counted FLOPs) and the autocast dtype."""
        self.example = (args, dict(kwargs or {}))
        self.autocast_dtype = self._autocast()

    def _autocast(self) -> str | None:
        torch = self._torch
        try:
            for device in ("cuda", "cpu"):
                if torch.is_autocast_enabled(device):
                    return str(torch.get_autocast_dtype(device))
        except Exception:
            pass
        return None

    @property
    def example_pending(self) -> bool:
        """The root is known and a training batch of it will be kept at its next training call."""
        candidate = self._candidates.get(self._root_id) if self._root is not None else None
        return candidate is not None and not candidate.lightning and self.example is None

    def release_example(self) -> None:
        """Drop the kept batch (after the FLOP count).

        An empty example, not ``None``, so the call wrapper does not capture another.
        """
        self.example = None if self.example is None else ((), {})

    def _make_scale(self, original: Any) -> Any:
        probes = self

        @functools.wraps(original)
        def scale(scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(scaler, outputs, *args, **kwargs)
            if probes._active and out is not outputs and getattr(out, "ndim", None) == 0:
                try:
                    probes._scaled = (weakref.ref(out), scaler._scale, _divided(getattr(outputs, "grad_fn", None)))
                    probes._fast_backward = False
                except Exception:
                    probes._scaled = None
            return out

        return scale

    def _make_backward(self, original: Any) -> Any:
        if not _plain_backward(original):
            return self._make_any_backward(original)
        probes = self
        tensor_type = self._torch.Tensor

        # torch.autograd.backward's own parameters, passed on positionally: no tuple or dict is built per call
        @functools.wraps(original)
        def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None, create_graph: bool = False,
                     grad_variables: Any = None, inputs: Any = None) -> Any:
            if probes._in_backward or not probes._backward_on:
                return original(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
            probes._in_backward = True
            try:
                if grad_tensors is None:
                    if (probes._fast_backward and type(tensors) is tensor_type and tensors.ndim == 0
                            and tensors.is_cpu):
                        # hot path (issue 12): a 0-d CPU loss (host memory, no device to wait for), unscaled,
                        # read at once and summed in place; its grad_fn is read only if a second part comes
                        try:
                            value = tensors.item()
                            if probes._fast_parts:  # a second part: division matters (accumulation or not)
                                probes._fast_division(tensors)
                                probes._fast_sum += value
                            else:
                                probes._fast_first = tensors  # held until the step (see _fast_division)
                                probes._fast_sum = value
                            probes._fast_parts += 1
                        except Exception as exc:
                            probes._backward_fault(exc)
                    elif not probes._paused:
                        probes._on_backward(tensors)
                return original(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
            finally:
                probes._in_backward = False

        return backward

    def _make_any_backward(self, original: Any) -> Any:
        """The wrapper for a ``torch.autograd.backward`` whose parameters differ from torch 2.x's: general path."""
        probes = self

        @functools.wraps(original)
        def backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            if probes._in_backward or not probes._backward_on:
                return original(tensors, grad_tensors, *args, **kwargs)
            probes._in_backward = True
            try:
                if grad_tensors is None and not probes._paused:
                    probes._on_backward(tensors)
                return original(tensors, grad_tensors, *args, **kwargs)
            finally:
                probes._in_backward = False

        return backward

    def _backward_fault(self, exc: BaseException) -> None:
        """Loss capture failed: warn once and stop capturing (training thread)."""
        self._monitor.warn_once("probe-loss", f"loss capture disabled: {exc!r}")
        self._backward_on = False
        self._refresh_fast()
        self._loss = None
        self._clear_fast_loss()

    def _on_backward(self, tensors: Any) -> None:
        try:
            items = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
            for tensor in items:
                if getattr(tensor, "ndim", None) != 0:
                    continue
                loss = self._loss
                if loss is None:
                    loss = self._loss = self._fast_loss()
                    self._fast_backward = False  # the step's loss is a StepLoss now (until the step)
                    self._steady = False
                scaled = self._scaled
                if scaled is not None and scaled[0]() is tensor:
                    self._scaled = None
                    loss.add(self._monitor.scalar_reader, tensor, scaled[1], divided=scaled[2])
                else:
                    loss.add(self._monitor.scalar_reader, tensor, divided=_divided(tensor.grad_fn))
            callback = self._on_training
            if callback is not None:
                callback()
        except Exception as exc:
            self._backward_fault(exc)

    def _clear_fast_loss(self) -> None:
        """Forget the parts read on the backward fast path (a step closed, a fault, a stop)."""
        self._fast_parts = 0
        self._fast_sum = 0.0
        self._fast_divided = True
        self._fast_first = None

    def _fast_division(self, tensor: Any) -> None:
        """Fold the held first part's and ``tensor``'s division into ``_fast_divided`` (steps of several parts)."""
        first = self._fast_first
        if first is not None:
            self._fast_first = None
            self._fast_divided = self._fast_divided and _divided(first.grad_fn)
        self._fast_divided = self._fast_divided and _divided(tensor.grad_fn)

    def _fast_loss(self) -> StepLoss:
        """A StepLoss holding the parts read on the fast path so far (then reset)."""
        loss = StepLoss(LOSS_SERIES)
        parts = self._fast_parts
        if parts:
            # the sum as the first part and zeros for the others: the same value and the same part count
            loss.parts.extend([[self._fast_sum, 1.0]] + [[0.0, 1.0] for _ in range(parts - 1)])
            first = self._fast_first
            if first is not None:  # one part so far: its division not yet read
                self._fast_divided = _divided(first.grad_fn)
            loss.divided = self._fast_divided
        self._clear_fast_loss()
        return loss

    # -- per step ------------------------------------------------------------------
    def _is_newer(self, optimizer: Any) -> bool:
        """A non-primary optimizer built after the primary's last step (a sweep's next model)."""
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            return True
        created = self._created.get(id(optimizer))
        return created is not None and created[0]() is optimizer and created[1] > self._primary_last_event

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if self._steady and self._fast_parts == 1 and self._calls == 1 and self._primary() is optimizer:
                # hot path (issue 12): the primary optimizer of a known root called once, one 0-d CPU loss read
                # at backward; _steady is cleared by whatever needs the general path (a StepLoss, a candidate's
                # call, a new optimizer, an eval span, a pause); one call leaves _max_calls as it is
                tokens = self._pending_tokens
                self._pending_tokens = 0
                self._calls = 0
                self._fast_steps += 1
                value = self._fast_sum  # the one part (the next first part overwrites it)
                self._fast_parts = 0
                self._fast_first = None  # the loss tensor is the loop's again
                self._monitor.on_step_read(tokens, value)
                return
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}")
            return
        if not self._active:
            return
        try:
            callback = self._on_training
            if callback is not None:  # an optimizer step ends an open eval span (the time split)
                callback()
            primary = self._primary() if self._primary is not None else None
            if primary is not optimizer:
                if primary is not None and not self._is_newer(optimizer):
                    self._on_other_step(optimizer)
                    return
                self._primary = weakref.ref(optimizer)  # the first, or a sweep's new optimizer
                self._others.pop(id(optimizer), None)
                self._root = None
                self._root_id = 0
                self._steady = False
                self._refresh_fast()
                self._gave_up = False
            self._events += 1
            self._primary_last_event = self._events
            if self._root is None and not self._gave_up:
                if not self._choose_root(optimizer, sys._getframe(1)) and self._monitor.steps + 1 >= DISCOVERY_STEPS:
                    self._gave_up = True
                    self._monitor.warn_once("probe-root", self._no_root_message())
            elif "trained" not in self.params:
                trained = self._trained(optimizer)
                self.params.update(trained=sum(trained.values()), optimizer_tensors=len(trained))
            if self._candidate_calls:
                self._candidate_calls = False
                for candidate in self._candidates.values():
                    candidate.tokens = candidate.calls = 0
            # the next steps of this optimizer may take the short path (see _refresh_fast)
            self._steady = (self._root is not None and "trained" in self.params and self._active
                            and not self._paused and self._on_training is None)
            tokens, self._pending_tokens = self._pending_tokens, 0
            if self._calls > self._max_calls:
                self._max_calls = self._calls
            self._calls = 0
            loss, self._loss = self._loss, None
            self._refresh_fast()  # the loss may take the backward fast path again
            parts = self._fast_parts
            if loss is None and parts:  # hot path: the loss was read at backward (inline _note)
                info = self._losses_info
                info["steps"] += 1
                if parts > 1:
                    if parts > info["max_parts"]:
                        info["max_parts"] = parts
                    if self._fast_divided:
                        info["divided"] += 1
                    else:
                        info["ambiguous"] += 1
                elif not info["max_parts"]:
                    info["max_parts"] = 1
                value = self._fast_sum
                self._fast_parts = 0  # inline _clear_fast_loss: a step of several parts (accumulation) comes here
                self._fast_sum = 0.0
                self._fast_divided = True
                self._fast_first = None
                self._monitor.on_step_read(tokens, value)
                return
            if loss is not None:
                self._note(loss)
            self._monitor.on_step(tokens, loss)
        except Exception as exc:
            self._monitor.warn_once("probe-step", f"step probe fault: {exc!r}")

    def _on_other_step(self, optimizer: Any) -> None:
        """A secondary optimizer stepped: what was computed since the last step was its work."""
        self._pending_tokens = 0
        self._calls = 0
        loss, self._loss = self._loss, None
        self._refresh_fast()
        if loss is None and self._fast_parts:
            loss = self._fast_loss()
        if loss is not None:
            number = self._others.setdefault(id(optimizer), len(self._others) + 2)
            loss.series = f"{LOSS_SERIES}.optimizer{number}"
            self._monitor.add_loss(loss)

    def _note(self, loss: StepLoss) -> None:
        info = self._losses_info
        info["steps"] += 1
        info["max_parts"] = max(info["max_parts"], len(loss.parts))
        info["ambiguous"] += loss.ambiguous
        info["divided"] += loss.divided and len(loss.parts) > 1
        info["scaled"] += loss.scaled

    # -- provenance ----------------------------------------------------------------
    def _write_info(self) -> None:
        """``series_info`` entries for ``train_loss`` and ``tokens_per_step``."""
        info = self._monitor.series_info
        n = dict(self._losses_info)
        n["steps"] += self._fast_steps
        if n["steps"] and LOSS_SERIES not in info:
            how = "the value passed to backward" if n["max_parts"] <= 1 else \
                f"the sum of the values passed to backward between optimizer steps (up to {n['max_parts']})"
            notes = []
            if n["divided"]:
                notes.append("the loop divided each micro-batch loss (gradient accumulation), so the sum "
                             "is the per-step loss")
            if n["scaled"]:
                notes.append("each divided by the GradScaler scale that multiplied it")
            if n["ambiguous"]:
                notes.append(f"ambiguous on {n['ambiguous']} of {n['steps']} steps: several backward calls "
                             "without a division; shown is their sum (the loss whose gradient the step "
                             "applied); if each was a full micro-batch loss, the per-step mean is the sum "
                             "divided by the number of calls")
            info[LOSS_SERIES] = {"provenance": "measured", "source": f"loss capture: {how}",
                                 "ambiguous": bool(n["ambiguous"]), "note": "; ".join(notes)}
        for number in sorted(set(self._others.values())):
            info.setdefault(f"{LOSS_SERIES}.optimizer{number}", {
                "provenance": "measured",
                "source": f"loss capture: values passed to backward before a step of optimizer {number} "
                          "(not the primary optimizer, whose steps are counted)"})
        if self._roots_found:
            notes = []
            if self._max_calls > 1:
                notes.append(f"the model was called up to {self._max_calls} times per step; each call's batch "
                             "counts (a GAN's discriminator on real and generated samples counts both)")
            if self._first_step_missed:
                notes.append("counted from step 2: the optimizer was built before the run where it could "
                             "not be seen (pass model= to count step 1)")
            info[TOKENS_SERIES] = {"provenance": "counted",
                                   "source": f"batches of {self.root_name} called with gradients enabled",
                                   "note": "; ".join(notes)}
