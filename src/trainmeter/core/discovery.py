"""Discovery of the trained model: candidates from the optimizers' parameters, then the root at the first step."""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from threading import get_ident
from typing import Any

from trainmeter.core.patches import take_off_call
from trainmeter.core.reachable import (
    MODEL_SHARE,
    _instance,
    _is_compiled,
    _is_lightning_module,
    _torch_class,
    holds,
    most_trained,
    no_root_message,
    others_only,
    reachable,
    reader_name,
    trained_in,
    trained_params,
)
from trainmeter.core.root_calls import autocast
from trainmeter.core.wrappers import direct_call_impl

MAX_CANDIDATES = 64
DISCOVERY_STEPS = 20
# how long (run clock) another optimizer's models stay watched for a thread that has not trained yet: the GIL's switch
# interval lets the first thread run tens of short steps before another runs at all (docs/spec.md section 2, "Threads")
KEEP_OTHERS_S = 10.0


@dataclass(slots=True, eq=False)
class _Candidate:
    ref: weakref.ReferenceType[Any]
    tokens: int = 0
    unit: str | None = None
    calls: int = 0
    example: tuple[Any, Any, str | None] | None = None  # first batch seen (args, kwargs, autocast)


class Discovery:
    """The watched modules (candidates), the optimizers built in the run, and the root chosen among them. Training
    thread.

    Attributes:
        candidates: ``id(module) -> _Candidate`` of the watched modules (read by the call wrapper; iterated through
            ``list()`` snapshots, as ``_created``: an optimizer built in another thread adds to it).
        model: A weak reference to the trained model (docs/spec.md section 2, "The model rule"), or ``None``.
        root: A weak reference to the module whose calls are the batches (the model, or a part of it), or ``None``;
            ``root_id`` its ``id``.
        direct_call: torch's ``Module._call_impl`` when the root's fast call may call it itself, else ``None``.
        compiling: Something is or was compiled in the run: torch's own classes are not patched.
        params: The model's parameter counts and the primary optimizer's (``trained``, ``optimizer_tensors``).
        roots_found, first_step_missed: For the ``tokens_per_step`` provenance.
    """

    def __init__(self, hot: Any, steps: Any, monitor: Any, threads: Any, root_calls: Any, patches: Any) -> None:
        self._hot = hot
        self._steps = steps
        self._monitor = monitor
        self._threads = threads
        self._root_calls = root_calls
        self._patches = patches
        self._torch: Any = None
        self._wrap_call: Any = None  # the call wrapper's factory (attr, original), None while switched off
        self._compile_watch_on = False
        self.candidates: dict[int, _Candidate] = {}
        self._patched_classes: set[tuple[type, str]] = set()
        self._set_aside: set[int] = set()  # candidates unwatched while something is compiled
        self.model: weakref.ReferenceType[Any] | None = None
        self.root: weakref.ReferenceType[Any] | None = None
        self.root_id = 0
        self._declared: weakref.ReferenceType[Any] | None = None  # tm.monitor(model=...)
        self.direct_call: Any = None
        self.compiling = False
        self._keep_others_until_s = 0.0  # another optimizer's models stay watched until then
        self._events = 0  # optimizers built (and primary steps on the general path), in order
        self._created: dict[int, tuple[weakref.ReferenceType[Any], int]] = {}  # optimizer id -> (ref, event)
        self._primary_last_event = 0
        self._candidate_calls = False
        self._gave_up = False
        self.params: dict[str, Any] = {}
        self.root_name: str | None = None
        self.roots_found = 0
        self.first_step_missed = False

    def start(self, torch: Any, wrap_call: Any, compile_watch: bool) -> None:
        """Installed: ``wrap_call(attr, original)`` makes a watched class's wrapper (``None``: switched off);
        ``compile_watch``: ``torch.compile`` is watched (the fast call may call ``_call_impl``)."""
        self._torch = torch
        self._wrap_call = wrap_call
        self._compile_watch_on = compile_watch

    def stop(self) -> None:
        self._patched_classes.clear()
        self.candidates.clear()
        self._set_aside.clear()  # the optimizers built stay known (weakly): the passport's params.trained

    def reset(self) -> None:
        """Forget the root (a forked child may train another model); the candidates' counts start afresh."""
        self.new_primary()  # (its params too)
        self.root_name = None
        for candidate in list(self.candidates.values()):
            candidate.tokens = candidate.calls = 0
            candidate.example = None

    def scan(self, frame: Any) -> None:
        """At the start: optimizers already built (an earlier cell) name their modules."""
        objects = reachable(frame, self._torch.nn.Module)
        modules = self._modules(objects)
        for optimizer in objects:
            if _instance(optimizer, self._torch.optim.Optimizer):
                # known, never newer than the primary (event 0): another thread may step it (_drop_others)
                self._created.setdefault(id(optimizer), (weakref.ref(optimizer), 0))
                self.watch_owners(optimizer, modules)
        if any(_is_compiled(c.ref()) for c in list(self.candidates.values())):
            self.on_compiling()  # a compiled model is about to be trained

    def on_optimizer_built(self, optimizer: Any, frame: Any) -> None:
        self.note_optimizer(optimizer, self._modules(reachable(frame, self._torch.nn.Module)))

    def _modules(self, objects: list[Any]) -> list[Any]:
        return [o for o in objects if _instance(o, self._torch.nn.Module)]

    def note_optimizer(self, optimizer: Any, modules: list[Any]) -> None:
        """A new optimizer (or a framework's stand-in): the modules holding its parameters become candidates."""
        self._events += 1
        self._created[id(optimizer)] = (weakref.ref(optimizer), self._events)
        self._hot.steady = False  # the primary's next step marks its event (see is_newer) on the general path
        self.watch_owners(optimizer, modules)

    def is_newer(self, optimizer: Any) -> bool:
        """A non-primary optimizer built after the primary's last step (a sweep's next model); one not seen built is
        known from here on, never newer."""
        if self._hot.primary_optimizer() is None:
            return True
        created = self._created.setdefault(id(optimizer), (weakref.ref(optimizer), 0))
        return created[0]() is optimizer and created[1] > self._primary_last_event

    def new_primary(self) -> None:  # another optimizer became the primary: its root is found afresh
        self.model = self.root = None
        self.root_id = 0
        self.params = {}
        self._hot.steady = False
        self._hot.refresh()
        self._gave_up = False

    def on_primary_step(self, optimizer: Any, frame: Any) -> None:
        """The primary optimizer stepped (general path): find the root, or give up after DISCOVERY_STEPS."""
        self._events += 1
        self._primary_last_event = self._events
        if self.root is None and not self._gave_up:
            if not self._choose_root(optimizer, frame) and self._steps.steps + 1 >= DISCOVERY_STEPS:
                self._gave_up = True
                self._monitor.warn_once("probe-root", no_root_message(self.declared_model()))
        elif "trained" not in self.params:
            self._trained(optimizer)
        if self._candidate_calls:
            self._candidate_calls = False
            for candidate in list(self.candidates.values()):
                candidate.tokens = candidate.calls = 0

    def watch_owners(self, optimizer: Any, modules: list[Any], force: bool = False) -> None:
        """Watch the modules among ``modules`` that hold parameters of ``optimizer``. A module compiled with
        ``torch.compile`` is watched through its wrapper only: Dynamo guards on the class of what it traces."""
        trained = trained_params(optimizer)
        compiled = {id(m._orig_mod) for m in modules if _is_compiled(m)}
        for module in modules:
            if id(module) in compiled:
                continue
            if len(self.candidates) >= MAX_CANDIDATES:
                return
            if id(module) not in self.candidates and any(id(p) in trained for p in module.parameters()):
                self.watch(module, force)
        owners = [m for m in modules if id(m) in self.candidates]
        index = most_trained(trained, owners, share=1.0)
        if index is not None and self.root is None:  # it may be trained through a method of its: its parts show
            self.watch_inside(owners[index], trained)  # its batches from the first step (dropped with the others)

    def watch(self, module: Any, force: bool = False) -> None:
        cls = type(module)
        if self.compiling and not force and _torch_class(cls):
            # Dynamo guards on the class dicts of what it traces: torch's own classes stay untouched,
            # and a compiled wrapper made of this module is watched instead
            self._set_aside.add(id(module))
            return
        self.candidates[id(module)] = _Candidate(weakref.ref(module))
        attr = "training_step" if _is_lightning_module(module) else "__call__"
        if (cls, attr) not in self._patched_classes and self._wrap_call is not None:
            self._patched_classes.add((cls, attr))
            self._patches.wrap(cls, attr, functools.partial(self._wrap_call, attr))

    def unwatch(self, module: Any) -> None:
        self.candidates.pop(id(module), None)
        self._unpatch_class(type(module))

    def _unpatch_class(self, cls: type) -> None:
        """Put ``cls``'s call back when no watched instance needs the patch."""
        if (cls, "__call__") not in self._patched_classes:
            return
        if any(type(c.ref()) is cls for c in list(self.candidates.values())):
            return
        self._patched_classes.discard((cls, "__call__"))
        take_off_call(cls)

    def knows(self, module: Any) -> bool:
        """Whether ``module`` is watched, or was set aside when something was compiled."""
        return id(module) in self.candidates or id(module) in self._set_aside

    def on_compiling(self) -> None:
        """Something is compiled in this run: take the wrappers off torch's own module classes."""
        self.compiling = True
        self._hot.refresh()  # the fast call reads _compiled_call_impl again
        for candidate in list(self.candidates.values()):
            module = candidate.ref()
            if module is not None and _torch_class(type(module)):
                self._set_aside.add(id(module))  # its compiled wrapper, if one is made now, is watched instead
                self.unwatch(module)

    def on_call(self, module: Any, args: Any, kwargs: Any, lightning: bool) -> None:
        """A watched module's outermost call on lane 1's thread (the call wrapper's general path)."""
        hot = self._hot
        if hot.paused_in(get_ident()) or not (lightning or self._torch.is_grad_enabled()):
            return  # paused: our own FLOP count runs in this thread (another thread's training goes on, counted)
        candidate = self.candidates.get(id(module))
        if candidate is None or candidate.ref() is not module:
            return
        try:
            counted = self._root_calls.read(args[:1] if lightning else args, kwargs)
            if id(module) == self.root_id:
                self._root_calls.count(module, args, kwargs, lightning, counted)
                return
            self._candidate_calls = True
            hot.steady = False
            candidate.calls += 1
            if candidate.example is None and self.root is None:
                candidate.example = (args, dict(kwargs or {}), autocast())
            if counted is not None:
                candidate.tokens += counted[0]
                candidate.unit = counted[1]
        except Exception as exc:
            self._monitor.warn_once("probe-tokens", f"token counting disabled: {exc!r}")
            hot.pause(True)

    def _choose_root(self, optimizer: Any, frame: Any) -> bool:
        """Pick the model for ``optimizer`` and the module whose calls are its batches (docs/spec.md section 2, "The
        model rule"); credit its batches of this step. Returns whether the batches' module was found."""
        trained = self._trained(optimizer)
        called = [c for c in list(self.candidates.values()) if c.calls and c.ref() is not None]
        model = self.model() if self.model is not None else None
        if model is None:
            everything = [c.ref() for c in list(self.candidates.values())]
            index = most_trained(trained, everything, frozenset(id(c.ref()) for c in called), MODEL_SHARE)
            model = everything[index] if index is not None else None
            if model is None:  # the optimizer was not seen being built: look around the step's caller
                before = set(self.candidates)
                self.watch_owners(optimizer, self._modules(reachable(frame, self._torch.nn.Module)), force=True)
                late = [c.ref() for k, c in list(self.candidates.items()) if k not in before]
                index = most_trained(trained, late, share=MODEL_SHARE)
                if index is None:
                    return False
                # counting beats a possible recompile here; its batches are read from the next step on
                self.first_step_missed = self.first_step_missed or self._steps.steps <= 1
                self._set_model(late[index])
                self.watch_inside(late[index], trained)
                return False
            self._set_model(model)
        inside = [c for c in called if holds(model, c.ref())]
        index = most_trained(trained, [c.ref() for c in inside], frozenset([id(model)]))
        if index is None:  # the model is never called itself (trained through a method of its): watch its parts
            self.watch_inside(model, trained)
            return False
        candidate = inside[index]
        self._set_root(candidate.ref())
        if self._steps.steps == 1:  # found at step 2: step 1's batches came before (an autostarted rank)
            self.first_step_missed = True
        self._root_calls.credit(candidate)
        if candidate.ref() is not model:  # no pass of the model can be made from its part's batch
            self._root_calls.release_example()
        for other in list(self.candidates.values()):
            other.example = None
        self.drop_others()
        return True

    def _trained(self, optimizer: Any) -> dict[int, int]:
        """The parameters ``optimizer`` trains, counted in :attr:`params`."""
        trained = trained_params(optimizer)
        self.params.update(trained=sum(trained.values()), optimizer_tensors=len(trained))
        return trained

    def watch_inside(self, model: Any, trained: dict[int, int]) -> None:
        """Watch ``model`` and its children holding trained parameters: the next step shows which are called. Not
        the children once something is compiled (Dynamo guards on the classes it traces)."""
        parts = () if self.compiling or _is_compiled(model) else tuple(model.children())
        for module in (model, *parts):
            if id(module) not in self.candidates and len(self.candidates) < MAX_CANDIDATES and any(
                    id(p) in trained for p in module.parameters()):
                self.watch(module, force=module is model)

    def drop_others(self, final: bool = False) -> None:
        """Stop watching every candidate but the root and the models kept for other threads (docs/spec.md section 2,
        "Threads"); not once something is compiled (a class put back would recompile)."""
        if self.compiling or self._threads.threaded:  # several threads: the other lanes' models stay watched
            return
        root_id = self.root_id
        now_s = self._steps.now()
        if not final:
            self._keep_others_until_s = now_s + KEEP_OTHERS_S
        optimizers = [ref() for ref, _ in list(self._created.values())]
        kept = (others_only(self._hot.primary_optimizer(), optimizers, self.candidates, root_id)
                if not final or now_s < self._keep_others_until_s else set())
        for key in [k for k in list(self.candidates) if k != root_id and k not in kept]:
            del self.candidates[key]
        if kept:  # models of optimizers another thread may step (docs/spec.md section 2, "Threads"): for
            # DISCOVERY_STEPS steps and KEEP_OTHERS_S seconds at least, looked at again every DISCOVERY_STEPS steps
            self._monitor.at_step(self._steps.steps + DISCOVERY_STEPS, lambda: self.drop_others(final=True))
        for cls, _attr in list(self._patched_classes):
            self._unpatch_class(cls)  # its __call__ patch only

    def _set_root(self, module: Any) -> None:
        if id(module) not in self.candidates:
            self.watch(module, force=True)
        if self.model is None or self.model() is None:
            self._set_model(module)
        self.root = weakref.ref(module)
        self.root_id = id(module)
        # its fast call may call torch's _call_impl itself while torch.compile is watched (core/wrappers.py)
        self.direct_call = direct_call_impl(module, self._torch) if self._compile_watch_on else None
        self._hot.fast_calls = False
        self._hot.steady = False
        self._hot.refresh()
        self.roots_found += 1
        self._root_calls.new_root()

    def _set_model(self, module: Any) -> None:
        """The trained model: its name, parameter counts, and the module the run's wings read."""
        self.model = weakref.ref(module)
        self.root_name = type(module).__name__
        self.params.update(root_total=sum(p.numel() for p in module.parameters()),
                           root_trainable=sum(p.numel() for p in module.parameters() if p.requires_grad))
        self._monitor.set_model(module, self._monitor.token_unit)

    def reader(self) -> str | None:
        """Whose calls are the batches when not the model's (``"MlpExtractor inside ActorCriticPolicy"``), or ``None``."""
        return reader_name(self.root() if self.root else None, self.model() if self.model else None)

    def run_params(self) -> dict[str, Any]:
        """:attr:`params` with ``trained``: the model's parameters that any optimizer of the run trains (with no model,
        all they train; docs/spec.md section 2, "Parameters")."""
        params = dict(self.params)
        if "trained" in params:
            optimizers = [self._hot.primary_optimizer(), *(ref() for ref, _ in list(self._created.values()))]
            params["trained"] = trained_in(self.model() if self.model is not None else None, optimizers)
        return params

    def is_candidate(self, module: Any) -> bool:
        """Whether ``module`` is watched as a possible root (before the root is known). Any thread."""
        candidate = self.candidates.get(id(module))
        return candidate is not None and candidate.ref() is module

    def declare_root(self, module: Any) -> None:  # tm.monitor(model=...)
        self._declared = weakref.ref(module)
        self._set_model(module)
        self._set_root(module)

    def declared_model(self) -> Any:
        return self._declared() if self._declared is not None else None
