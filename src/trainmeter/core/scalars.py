"""Reading scalars from the user's values without a device sync.

Python numbers are taken as they are. A CPU tensor is read directly (no device
to sync). A CUDA tensor is copied into a pinned host buffer with
``non_blocking=True`` and an event is recorded; its value is read only once
``event.query()`` says the copy completed, so the training thread never waits.
Not thread-safe: use from the training thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

_NUMBER_TYPES = (float, int)
MAX_PENDING = 4096


class ScalarReader:
    """Turns floats and 0-d tensors into floats, deferring CUDA reads."""

    def __init__(self) -> None:
        self.queue: deque[tuple[Hashable, Any, Any]] = deque()  # deferred (key, host buffer, event)
        self._pool: list[Any] = []
        self.dropped = 0

    def read(self, value: Any, key: Hashable) -> float | None:
        """Return ``value`` as a float now, or ``None`` if deferred (or unreadable).

        Deferred values come back from :meth:`poll` with their ``key``.

        Raises:
            TypeError: When ``value`` is neither a number nor a one-element tensor.
        """
        if type(value) in _NUMBER_TYPES:
            return float(value)
        is_cpu = getattr(value, "is_cpu", None)
        if is_cpu is None:
            if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
                raise TypeError(f"expected a float or a 0-d tensor, got {type(value).__name__}")
            return float(value)
        if value.ndim != 0 and value.numel() != 1:
            raise TypeError(f"expected a float or a 0-d tensor, got a tensor of shape {tuple(value.shape)}")
        if is_cpu:
            # A CPU tensor lives in host memory: reading it waits for no device (the rule against
            # .item() in the hot path is about device syncs; CUDA tensors never take this path).
            return float(value.item())
        if not value.is_cuda:
            return None  # other devices: no sync-free read path; leave the value out
        self._defer(value, key)
        return None

    def _defer(self, value: Any, key: Hashable) -> None:
        import torch

        if len(self.queue) >= MAX_PENDING:
            self.queue.popleft()
            self.dropped += 1
        host = None
        for i, buf in enumerate(self._pool):
            if buf.dtype == value.dtype:
                host = self._pool.pop(i)
                break
        if host is None:
            host = torch.empty((), dtype=value.dtype, device="cpu", pin_memory=True)
        host.copy_(value.detach().reshape(()), non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(value.device))
        self.queue.append((key, host, event))

    def poll(self) -> list[tuple[Hashable, float]]:
        """Return ``(key, value)`` for deferred reads whose copies have completed."""
        done: list[tuple[Hashable, float]] = []
        while self.queue and self.queue[0][2].query():
            key, host, _ = self.queue.popleft()
            done.append((key, float(host)))
            if len(self._pool) < 64:
                self._pool.append(host)
        return done

    @property
    def pending(self) -> int:
        """Deferred reads not yet completed."""
        return len(self.queue)


