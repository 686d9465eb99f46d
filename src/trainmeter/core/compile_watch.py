"""Compile handling: once something is compiled, batches are counted at the compiled wrapper, never in Dynamo."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from trainmeter.core.patches import PostImportHooks, take_off_call
from trainmeter.core.probe_state import guarded


class CompileWatch:
    """``torch.compile`` and ``OptimizedModule`` seen during the run (``discovery`` told; a compiled wrapper
    replaces its module). Training thread."""

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
        """Stop watching imports (the patches are the run's, restored with the others). Idempotent."""
        if self._imports is not None:
            self._imports.remove()
            self._imports = None

    def _make_compile(self, original: Any) -> Any:
        discovery, hot, warn = self._discovery, self._hot, self._warn

        @functools.wraps(original)
        def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 (torch.compile's own name)
            if hot.active and not discovery.compiling:
                guarded(warn, "probe-discovery", discovery.on_compiling)
            return original(*args, **kwargs)

        return compile

    def _patch_dynamo(self, module: ModuleType) -> None:
        """``torch.compile(model)`` during the run: count at the compiled wrapper, never inside Dynamo."""
        owner = getattr(module, "OptimizedModule", None)
        if self._hot.active and isinstance(owner, type):
            self._patches.wrap(owner, "__init__", self._make_compiled_init)

    def _make_compiled_init(self, original: Any) -> Any:
        discovery, hot, warn = self._discovery, self._hot, self._warn

        @functools.wraps(original)
        def __init__(compiled: Any, mod: Any, *args: Any, **kwargs: Any) -> None:
            watched = hot.active and discovery.knows(mod)
            if hot.active and not discovery.compiling:
                guarded(warn, "probe-discovery", discovery.on_compiling)
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
