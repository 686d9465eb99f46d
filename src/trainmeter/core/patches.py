"""Reversible patches for one run: attribute swaps and post-import hooks.

:class:`Patches` swaps an attribute for a wrapper and puts the original back only where the wrapper is still in
place (a later patch on top of ours is left alone; ours then goes inert behind its closed :class:`Gate`).
:class:`PostImportHooks` patches a library imported during the run before its first call, through
:data:`FINDER`, the one ``sys.meta_path`` finder of ours (an unwatched name costs it one dict lookup; it asks
the other finders and chains the loader they return). Each entry is listed in core/host_patches.py.

Thread safety: install/restore on the training thread; the finder may be consulted from any thread (a thread-local
guard stops recursion).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.faults import quietly

_MISSING = object()
ORIGINAL_ATTR = "__trainmeter_original__"


class Gate:
    """Whether wrappers act: open while the run is active (``active``), on its thread and process; ``depth`` is the
    nesting of wrapped calls on that thread."""

    __slots__ = ("active", "depth", "_pid", "_thread")

    def __init__(self) -> None:
        self.open()
        self.active = False

    def open(self) -> None:
        """Activate for the calling thread (the training thread) and process."""
        self._pid = os.getpid()
        self._thread = threading.get_ident()
        self.depth = 0
        self.active = True

    def close(self) -> None:  # every wrapper calls straight through from now on
        self.active = False

    def here(self) -> bool:
        """Whether a wrapper called now should act (active, same thread, same process)."""
        return self.active and threading.get_ident() == self._thread and os.getpid() == self._pid


def take_off_call(cls: type) -> Any:
    """Take our ``__call__`` wrapper off ``cls`` (its own or inherited one shows again); the wrapper, or ``None``."""
    ours = vars(cls).get("__call__")
    own = getattr(ours, ORIGINAL_ATTR, None)
    if own is None:
        return None
    delattr(cls, "__call__")
    if cls.__call__ is not own:
        cls.__call__ = own
    return ours


@dataclass(slots=True)
class _Patch:
    owner: Any
    attr: str
    own: Any  # the owner's own attribute before patching, or _MISSING (inherited)
    wrapper: Any


class Patches:
    """The attribute patches of one run (training thread only)."""

    def __init__(self) -> None:
        self._patches: list[_Patch] = []

    def wrap(self, owner: Any, attr: str, make: Callable[[Any], Any]) -> bool:
        """Replace ``owner.attr`` by ``make(original)``; whether it was patched. An attribute that already is one of our
        wrappers (a module re-exporting a patched function) is recorded, to be restored too, not wrapped twice."""
        original = getattr(owner, attr, None)
        if not callable(original):
            return False
        own = vars(owner).get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if any(p.wrapper is original for p in self._patches):
            self._patches.append(_Patch(owner=owner, attr=attr, own=getattr(original, ORIGINAL_ATTR), wrapper=original))
            return True
        wrapper = make(original)
        with suppress(AttributeError, TypeError):
            setattr(wrapper, ORIGINAL_ATTR, original)
        # recorded first: a Ctrl-C between the two leaves nothing unrestored (restore_all skips an unset one)
        self._patches.append(_Patch(owner=owner, attr=attr, own=own, wrapper=wrapper))
        setattr(owner, attr, wrapper)
        return True

    def set(self, owner: Any, attr: str, value: Any) -> None:
        """Set ``owner.attr = value`` and restore the previous value later (if still ``value``)."""
        self._patches.append(_Patch(owner=owner, attr=attr, own=vars(owner).get(attr, _MISSING), wrapper=value))
        setattr(owner, attr, value)

    def restore_all(self) -> None:
        """Put every original back where our wrapper is still in place. Idempotent."""
        while self._patches:
            p = self._patches.pop()
            with suppress(Exception):
                if vars(p.owner).get(p.attr, _MISSING) is not p.wrapper:
                    continue
                if p.own is _MISSING:
                    delattr(p.owner, p.attr)
                else:
                    setattr(p.owner, p.attr, p.own)


class _ChainedLoader:  # the real loader's, then the callbacks on the new module

    def __init__(self, loader: Any, callbacks: tuple[Callable[[ModuleType], None], ...]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        loader = self._loader
        with suppress(Exception):  # let the module see its real loader, as without the hook
            module.__loader__ = loader
            if module.__spec__ is not None:
                module.__spec__.loader = loader
        loader.exec_module(module)
        for callback in self._callbacks:
            quietly(callback, module)


class ImportFinder:
    """The one ``sys.meta_path`` finder of ours for the whole process: module name -> the installed hooks'
    callbacks. In ``sys.meta_path`` while any :class:`PostImportHooks` is installed; an unwatched name costs
    one dict lookup (``watched`` is replaced, never changed, so any thread may read it)."""

    def __init__(self) -> None:
        self.watched: dict[str, tuple[Callable[[ModuleType], None], ...]] = {}
        self.hooks: list[PostImportHooks] = []
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        """``importlib.abc.MetaPathFinder`` hook: chain the real loader of a watched module."""
        callbacks = self.watched.get(fullname)
        if callbacks is None:  # every unwatched import: this lookup only
            return None
        if getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:
            return None
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _ChainedLoader(spec.loader, callbacks)
        return spec

    def update(self, hooks: PostImportHooks, add: bool) -> None:
        """Add or remove one :class:`PostImportHooks`; the finder leaves ``sys.meta_path`` with the last."""
        if add:
            self.hooks.append(hooks)
        elif hooks in self.hooks:
            self.hooks.remove(hooks)
        watched: dict[str, tuple[Callable[[ModuleType], None], ...]] = {}
        for each in self.hooks:
            for name, callback in each.callbacks.items():
                watched[name] = (*watched.get(name, ()), callback)
        self.watched = watched
        if self.hooks and self not in sys.meta_path:
            sys.meta_path.insert(0, self)  # type: ignore[arg-type]
        elif not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)  # type: ignore[arg-type]


FINDER = ImportFinder()


class PostImportHooks:
    """Run ``callbacks[name](module)`` right after module ``name`` is imported (through :data:`FINDER`), at once for
    one already imported at :meth:`install`. A callback may run on any thread: quick, and its exceptions swallowed."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = dict(callbacks)
        self._installed = False

    def install(self) -> None:
        """Call back for modules already imported, then watch the rest."""
        for name, callback in self.callbacks.items():
            module = sys.modules.get(name)
            if module is not None:
                quietly(callback, module)
        if not self._installed and host_patches.enabled("import-hooks"):  # TRAINMETER_DISABLE=import-hooks
            self._installed = True
            FINDER.update(self, add=True)

    def remove(self) -> None:  # idempotent
        self._installed = False
        FINDER.update(self, add=False)
