"""The gradient norm the loop already computes: the return value of its clipping call (docs/spec.md section 2).

The wrappers keep only a reference to the returned 0-d tensor (the outermost of nested calls); trainmeter never
computes a norm itself. Training thread only (the :class:`~trainmeter.core.patches.Gate` skips other threads).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

from trainmeter.core.patches import Gate, Patches, PostImportHooks

GRAD_NORM_SERIES = "grad_norm"
ACCELERATE_MODULE = "accelerate.accelerator"
CLIP_SOURCE = "the norm the loop's clip-by-norm call computed (clip_grad_norm_, clip_grads_with_norm_ or accelerate's)"
REASON_NO_CLIP = ("the loop did not call torch.nn.utils.clip_grad_norm_ (clip by norm to record it; "
                  "trainmeter never computes the norm itself: that would add device work)")
REASON_BY_VALUE = "the loop clips by value (clip_grad_value_), which computes no norm"
REASON_NOT_PLAIN = ("a norm that is not a plain tensor, a replicated DTensor or a float is not read (a sharded or "
                    "partial DTensor norm would need a collective to read: trainmeter adds none)")


def _replicated_local(norm: Any) -> Any:
    """The local tensor of a DTensor norm replicated on every rank (FSDP2's ``clip_grad_norm_``: no collective, no
    sync), else ``None`` (a partial or sharded one would need ``full_tensor()``, a collective)."""
    placements = getattr(norm, "placements", None)
    if type(norm).__name__ != "DTensor" or not placements or not all(type(p).__name__ == "Replicate"
                                                                     for p in placements):
        return None
    return norm.to_local()


class ClipTap:
    """Keeps the latest gradient norm returned by the loop's clipping call: ``pending`` (a 0-d tensor or float),
    returned when ``counter.steps`` was ``pending_step`` (-1 without a counter); ``skipped`` counts norms not kept."""

    def __init__(self) -> None:
        self.pending: Any = None
        self.pending_step = -1
        self.counter: Any = None
        self.norm_calls = 0
        self.value_calls = 0
        self.skipped = 0
        self._gate = Gate()
        self._patches = Patches()
        self._hooks: PostImportHooks | None = None
        self._tensor_type: Any = None
        self.wrapped: list[str] = []

    def install(self, torch: Any) -> list[str]:
        """Wrap the clipping functions of ``torch`` (and accelerate's, now or at its import); return what was
        wrapped at once (:attr:`wrapped` also lists a later import's)."""
        self._tensor_type = torch.Tensor
        self._gate.open()
        wrapped = self.wrapped
        clip_module = getattr(torch.nn.utils, "clip_grad", None)
        for owner, label in ((clip_module, "torch.nn.utils.clip_grad"), (torch.nn.utils, "torch.nn.utils")):
            if owner is None:
                continue
            if self._patches.wrap(owner, "clip_grad_norm_", self._wrap_norm):
                wrapped.append(f"{label}.clip_grad_norm_")
            if self._patches.wrap(owner, "clip_grad_value_", functools.partial(self._wrap_after, by_value=True)):
                wrapped.append(f"{label}.clip_grad_value_")
        # the public alias only: torch's own clip_grad_norm_ calls the private _clip_grads_with_norm_
        if self._patches.wrap(torch.nn.utils, "clip_grads_with_norm_", self._wrap_after):
            wrapped.append("torch.nn.utils.clip_grads_with_norm_")
        fsdp = sys.modules.get("torch.distributed.fsdp")
        fsdp_class = getattr(fsdp, "FullyShardedDataParallel", None)
        if isinstance(fsdp_class, type) and self._patches.wrap(fsdp_class, "clip_grad_norm_", self._wrap_norm):
            wrapped.append("torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_")
        self._hooks = PostImportHooks({ACCELERATE_MODULE: self._wrap_accelerate})
        self._hooks.install()
        return list(wrapped)

    def _wrap_accelerate(self, module: Any) -> None:
        """``Accelerator.clip_grad_norm_``, at install or right after accelerate's import (any thread: quick)."""
        accelerator = getattr(module, "Accelerator", None)
        if self._gate.active and isinstance(accelerator, type) and self._patches.wrap(
                accelerator, "clip_grad_norm_", self._wrap_norm):
            self.wrapped.append("accelerate.Accelerator.clip_grad_norm_")

    def remove(self) -> None:
        """Put the originals back (where our wrapper is still in place). Idempotent."""
        self._gate.close()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self._patches.restore_all()
        self.pending = None

    def take_at(self, steps: int) -> Any:
        """Return and clear the pending norm if it was returned while step ``steps`` (the count with it included) was
        computed, else ``None``: a norm left from an earlier step is dropped, never recorded at a later step."""
        norm, self.pending = self.pending, None
        return norm if norm is not None and self.pending_step == steps - 1 else None

    def _note_norm(self, norm: Any) -> None:
        """The outermost clip-by-norm call returned: count it, keep ``norm`` if plain (a replicated DTensor's local)."""
        with contextlib.suppress(Exception):
            self.norm_calls += 1
            plain = (self._tensor_type, float)
            norm = norm if type(norm) in plain else _replicated_local(norm)
            if type(norm) in plain:
                self.pending = norm
                self.pending_step = self.counter.steps if self.counter is not None else -1
            else:
                self.skipped += 1

    def _wrap_norm(self, original: Any) -> Any:
        """A clipping call that returns the total norm (torch's, FSDP's, accelerate's)."""
        tap = self
        gate = self._gate

        @functools.wraps(original)
        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            if not gate.here():
                return original(*args, **kwargs)
            gate.depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                gate.depth -= 1
            if not gate.depth:
                tap._note_norm(result)
            return result

        return clip_grad_norm_

    def _wrap_after(self, original: Any, by_value: bool = False) -> Any:
        """``original``, then on the training thread: ``clip_grads_with_norm_(parameters, max_norm, total_norm,
        foreach=None)`` outside a clip-by-norm keeps the norm it was handed; ``by_value`` counts a clip by value."""
        gate = self._gate

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if gate.here() and by_value:
                self.value_calls += 1
            elif gate.here() and not gate.depth:
                self._note_norm(args[2] if len(args) > 2 else kwargs.get("total_norm"))
            return result

        return wrapper

    def missing_reason(self) -> str | None:
        """Why no norm was recorded, or ``None`` when one was."""
        if self.norm_calls:
            return None if self.skipped < self.norm_calls else REASON_NOT_PLAIN
        return REASON_BY_VALUE if self.value_calls else REASON_NO_CLIP
