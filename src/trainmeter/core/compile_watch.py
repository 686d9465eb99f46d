"""Compile handling: once something is compiled, batches are counted at the compiled wrapper, never in Dynamo."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from trainmeter.core.discovery import _torch_class
from trainmeter.core.patches import ORIGINAL_ATTR


class CompileWatch:
    """``torch.compile`` and ``OptimizedModule`` seen during the run (a part of
    :class:`~trainmeter.core.probes.TorchProbes`). Training thread."""

    _active: bool
    _compiling: bool

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
        self._refresh_fast()  # the fast call reads _compiled_call_impl again (module.compile() sets it next)
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

