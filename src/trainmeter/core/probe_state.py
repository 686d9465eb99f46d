"""The probes' per-call state (the fast flags, the last batch signature, the step's loss parts) and their switches.

:class:`ProbeState` is closed over by the wrappers (core/wrappers.py) and shared by the probes' parts. Training
thread (lane 1's).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any


class _Nobody:
    """What the call wrapper's root reference returns while no root is counted: never a module."""

    __slots__ = ("__weakref__",)


_NOBODY = _Nobody()
NO_ROOT = weakref.ref(_NOBODY)  # fast_ref while no root's calls take the fast path


class ProbeState:
    """The probes' fast flags, the root's last counted batch, the loss parts of the step in progress, and the cold
    switches (each set through a method that calls ``refresh``, which recomputes the fast flags from their inputs:
    ``TorchProbes._refresh_fast``).

    :meth:`new_probe_state` sets every per-call field, so none can be set at construction and forgotten elsewhere.

    Attributes:
        active: The probes are installed (between ``start`` and ``stop``).
        paused: The paused thread's forward and backward calls are not counted (our own FLOP count; a fault).
        paused_ident: The thread that paused (our FLOP count runs there).
        on_training: Called at each training forward, backward and step while set (an open eval span).
        capture_on: Loss capture is installed and not disabled by a fault.
    """

    __slots__ = (
        "primary", "fast_ref", "call_impl", "fast_backward", "steady", "backward_on", "in_backward", "depth", "calls",
        "pending_tokens",
        "last_type", "last_shape", "last_dtype", "last_key", "last_before", "last_tokens", "fast_calls",
        "fast_parts", "fast_sum", "fast_divided", "fast_first",
        "active", "paused", "paused_ident", "on_training", "capture_on", "refresh",
    )

    def __init__(self, refresh: Callable[[], None]) -> None:
        self.refresh = refresh
        self.active = False
        self.paused = False
        self.paused_ident = 0
        self.on_training: Callable[[], None] | None = None
        self.capture_on = False
        self.new_probe_state()

    def new_probe_state(self) -> None:
        """The probes' fast flags and the step's calls and loss parts, as before any call was seen."""
        self.primary: Any = None  # a weak reference to the primary optimizer (core/optimizer_steps.py), or None
        # the hot paths' flags, recomputed by TorchProbes._refresh_fast whenever one of their inputs changes:
        # a weak reference to the root while its positional batches are counted like the last one (else
        # NO_ROOT: a call, then an identity test, costs less than comparing an id, a large int, on CPython
        # 3.11), torch's Module._call_impl while the fast call may call it itself (else None), whether a
        # 0-d CPU loss may be read at backward, and whether a step may take the short path
        self.fast_ref: Callable[[], Any] = NO_ROOT
        self.call_impl: Callable[..., Any] | None = None
        self.fast_backward = False
        self.steady = False
        self.backward_on = False  # loss capture installed and not disabled by a fault
        self.in_backward = False
        self.depth = 0  # nesting of watched calls (the outermost one counts)
        self.calls = 0  # calls of the root since the last step
        self.pending_tokens = 0  # tokens counted since the last step
        # the last counted batch of the root (the call wrapper's fast path): type, shape, dtype, count; for a
        # keyword-only batch the keyword it was counted by and the token keys absent before it (core/batch.py)
        self.fast_calls = False
        self.last_type: Any = None
        self.last_shape: Any = None
        self.last_dtype: Any = None
        self.last_key: str | None = None  # None: a positional batch
        self.last_before: tuple[str, ...] = ()
        self.last_tokens = 0
        self.clear_fast_loss()

    def primary_optimizer(self) -> Any:
        """The primary optimizer, or ``None`` (none stepped yet, or it is gone). Any thread."""
        ref = self.primary
        return ref() if ref is not None else None

    def clear_fast_loss(self) -> None:
        """Forget the loss parts read on the backward fast path (a step closed, a fault, a stop)."""
        # the step's loss while every part was a 0-d CPU tensor read at once (the backward fast path)
        self.fast_parts = 0
        self.fast_sum = 0.0
        self.fast_divided = True  # every part after the first was divided (folded in from the second part on)
        # the first part's loss tensor, held from its backward to the step (or the second part, which reads
        # its grad_fn): a single-part step never reads a grad_fn
        self.fast_first: Any = None

    def set_active(self, active: bool) -> None:
        self.active = active
        self.refresh()

    def pause(self, paused: bool, *, refresh: bool = True) -> None:
        """Stop (or resume) counting the calling thread's calls (``refresh``: recompute the fast flags)."""
        self.paused = paused
        self.paused_ident = get_ident()
        if refresh:
            self.refresh()

    def watch_training(self, callback: Callable[[], None] | None) -> None:
        self.on_training = callback
        self.refresh()

    def capture(self, on: bool) -> None:
        """Loss capture installed (``True``) or turned off by a fault."""
        self.capture_on = self.backward_on = on
        self.refresh()

    def paused_in(self, ident: int) -> bool:
        """Our own forward and backward (the FLOP count) run in thread ``ident`` now."""
        return self.paused and self.paused_ident == ident


def guarded(warn: Callable[[str, str], None], key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn``; on a fault warn once under ``key`` (that probe is disabled) and return ``None``."""
    try:
        return fn(*args)
    except Exception as exc:
        warn(key, f"{key} disabled: {exc!r}")
        return None
