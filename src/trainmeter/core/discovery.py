"""Discovery of the trained model: candidates from the optimizers' parameters, then the root at the first step."""

from __future__ import annotations

import functools
import gc
import sys
import weakref
from types import ModuleType
from typing import Any

from trainmeter.core.batch import batch_seq
from trainmeter.core.patches import ORIGINAL_ATTR
from trainmeter.core.wrappers import direct_call_impl

MAX_CANDIDATES = 64
MAX_FRAMES = 48
MAX_ATTRS = 256
MAX_NAMES = 4096  # names looked at per namespace (a long notebook's user namespace)
_PLAIN = (str, bytes, int, float, bool, type(None))
DISCOVERY_STEPS = 20
# how long (run clock) another optimizer's models stay watched for a thread that has not trained yet: the GIL's switch
# interval lets the first thread run tens of short steps before another runs at all (docs/spec.md section 2, "Threads")
KEEP_OTHERS_S = 10.0


# Py_TPFLAGS_MANAGED_DICT (CPython 3.11 on): the instance keeps its attributes in values of the type's shared keys
# until something asks for its ``__dict__``, which then becomes a dict object for good (docs/spec.md section 2,
# "What the start looks at")
_MANAGED_DICT = 1 << 4 if sys.version_info >= (3, 11) else 0
_type_flags = type.__dict__["__flags__"].__get__  # a class's flags by the C getter: no metaclass code runs
_CONTAINERS = (dict, list, tuple, set, frozenset)


def _attribute_values(value: Any) -> list[Any]:
    """The values of ``value``'s instance attributes, at most :data:`MAX_ATTRS` (empty when it has none).

    An instance whose attributes are still in the shared-keys values is read through ``gc.get_referents``
    (its type's traverse, C only, no code of the object's runs), never by asking for ``__dict__``: that
    would turn them into a dict object for the rest of its life, and on CPython 3.11 every load of its
    attributes in the user's code (an optimizer's ``param_groups`` in ``zero_grad`` and ``step``) would then
    miss its specialization at every step. Other objects, and subclasses of a container (their traverse gives
    their items too), are read through their ``__dict__``. Never raises
    (an object without one, or that refuses to be looked at, has none). Training thread.
    """
    cls = type(value)
    # a subclass of a container traverses its items too (maybe millions): its __dict__ is the bounded read
    if _type_flags(cls) & _MANAGED_DICT and not issubclass(cls, _CONTAINERS):
        found: list[Any] = []
        for ref in gc.get_referents(value):
            if type(ref) is dict:  # the dict once made (or a dict an attribute holds): its values
                if len(ref) <= MAX_ATTRS:
                    found.extend(ref.values())
            elif ref is not cls:
                found.append(ref)
        return found[:MAX_ATTRS]
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except Exception:  # no __dict__ (slots), or an object that refuses to be looked at
        return []
    if type(attrs) is dict and len(attrs) <= MAX_ATTRS:
        return list(attrs.values())
    return []


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



class _Candidate:
    __slots__ = ("ref", "tokens", "unit", "calls", "example", "lightning")

    def __init__(self, module: Any) -> None:
        self.ref = weakref.ref(module)
        self.tokens = 0
        self.unit: str | None = None
        self.calls = 0
        self.example: tuple[Any, Any, str | None] | None = None  # first batch seen (args, kwargs, autocast)
        self.lightning = _is_lightning_module(module)



class Discovery:
    """Candidates and the root (a part of :class:`~trainmeter.core.probes.TorchProbes`). Training thread.

    Its fields (``_candidates``, ``_root``, ``params``, ...) are the probes', set in their constructor.
    """

    _candidates: dict[int, _Candidate]
    _keep_others_until_s: float
    params: dict[str, Any]
    seq_weights: Any

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
                        for item in _attribute_values(value):
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
                # known, never newer than the primary (event 0): another thread may step it (_drop_others)
                self._created.setdefault(id(optimizer), (weakref.ref(optimizer), 0))
                self._watch_owners(optimizer, modules)
        if any(_is_compiled(c.ref()) for c in self._candidates.values()):
            self._on_compiling()  # a compiled model is about to be trained


    def _on_optimizer_built(self, optimizer: Any, frame: Any) -> None:
        self._events += 1
        self._created[id(optimizer)] = (weakref.ref(optimizer), self._events)
        self.hot.steady = False  # the primary's next step marks its event (see _is_newer) on the general path
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
        if late or self._steps.steps == 1:  # found at step 2: step 1's batches came before (an autostarted rank)
            self._first_step_missed = self._first_step_missed or self._steps.steps <= 1
        if not late:
            if candidate.example is not None and candidate.unit == "tokens":  # S of the first step: its first batch's
                self.seq_weights.at(self._steps.tokens + self.hot.pending_tokens,
                                    batch_seq(candidate.example[0], candidate.example[1]))
            self.hot.pending_tokens += candidate.tokens
            self.hot.calls += candidate.calls
            if candidate.unit:
                self._monitor.set_token_unit(candidate.unit)
            if candidate.example is not None:
                self.example = candidate.example[:2]
                self.autocast_dtype = candidate.example[2]
        for other in self._candidates.values():
            other.example = None
        self._drop_others()
        return True

    def _drop_others(self, final: bool = False) -> None:
        """Stop watching every candidate but the root (docs/spec.md section 20): once it is known, the other modules'
        calls (an old model left in the notebook's namespace, a submodule held by a name) need no wrapper.
        A model built later for a new optimizer is watched again when that optimizer is built. Not once
        something is compiled: Dynamo guards on the class dicts it traced, and a class put back would recompile."""
        if self._compiling or self._threaded:  # several threads: the other lanes' models stay watched
            return
        root_id = self._root_id
        now_s = self._steps.now()
        if not final:
            self._keep_others_until_s = now_s + KEEP_OTHERS_S
        kept = self._other_optimizers_modules() if not final or now_s < self._keep_others_until_s else set()
        for key in [k for k in self._candidates if k != root_id and k not in kept]:
            del self._candidates[key]
        if kept:  # models of optimizers another thread may step (docs/spec.md section 2, "Threads"): for
            # DISCOVERY_STEPS steps and KEEP_OTHERS_S seconds at least, looked at again every DISCOVERY_STEPS steps
            self._monitor.at_step(self._steps.steps + DISCOVERY_STEPS, lambda: self._drop_others(final=True))
        for cls, attr in list(self._patched_classes):
            if attr == "__call__":
                self._unpatch_class(cls)

    def _other_optimizers_modules(self) -> set[int]:
        """Candidates holding parameters of another optimizer built in the run and none of the primary's."""
        primary = self._primary() if self._primary is not None else None
        mine = self._trained(primary) if primary is not None else {}
        others: set[int] = set()
        for ref, _ in self._created.values():
            optimizer = ref()
            if optimizer is not None and optimizer is not primary:
                others.update(self._trained(optimizer))
        kept: set[int] = set()
        for key, candidate in self._candidates.items():
            module = candidate.ref()
            if key == self._root_id or module is None or not others:
                continue
            ids = [id(p) for p in module.parameters()]
            if any(i in others for i in ids) and not any(i in mine for i in ids):
                kept.add(key)
        return kept

    def _set_root(self, module: Any) -> None:
        if id(module) not in self._candidates:
            self._watch(module, force=True)
        self._root = weakref.ref(module)
        self._root_id = id(module)
        # its fast call may call torch's _call_impl itself while torch.compile is watched (core/wrappers.py)
        self._direct_call = direct_call_impl(module, self._torch) if self._compile_watch_on else None
        self.hot.fast_calls = False
        self.hot.steady = False
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

