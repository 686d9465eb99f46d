"""Reading scalars without a device sync: a CUDA tensor is copied to a pinned host buffer without blocking and
read once its event completes (docs/spec.md section 2). Training thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

_NUMBER_TYPES = (float, int)
MAX_PENDING = 4096


class ScalarReader:
    """Turns floats and 0-d tensors into floats, deferring CUDA reads (``on_defer()`` at each)."""

    def __init__(self, on_defer: Callable[[], None] | None = None) -> None:
        self.on_defer = on_defer
        self.queue: deque[tuple[Hashable, Any, Any]] = deque()  # deferred (key, host buffer, event)
        self._pool: list[Any] = []

    def read(self, value: Any, key: Hashable) -> float | None:
        """``value`` as a float now, or ``None`` if deferred (back from :meth:`poll` with ``key``) or unreadable;
        ``TypeError`` when it is neither a number nor a one-element tensor."""
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
            # host memory: reading it waits for no device (the rule against .item() is about device syncs)
            return float(value.item())
        if not value.is_cuda:
            return None  # other devices: no sync-free read path; leave the value out
        import torch

        if len(self.queue) >= MAX_PENDING:
            self.queue.popleft()  # the oldest read is lost (bounded memory)
        i = next((i for i, buf in enumerate(self._pool) if buf.dtype == value.dtype), None)
        host = torch.empty((), dtype=value.dtype, device="cpu", pin_memory=True) if i is None else self._pool.pop(i)
        host.copy_(value.detach().reshape(()), non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(value.device))
        self.queue.append((key, host, event))
        if self.on_defer is not None:
            self.on_defer()
        return None

    def poll(self) -> list[tuple[Hashable, float]]:
        """Return ``(key, value)`` for deferred reads whose copies have completed."""
        done: list[tuple[Hashable, float]] = []
        while self.queue and self.queue[0][2].query():
            key, host, _ = self.queue.popleft()
            done.append((key, float(host)))
            if len(self._pool) < 64:
                self._pool.append(host)
        return done

    pending = property(lambda self: len(self.queue), doc="Deferred reads not yet completed.")


class StepLoss:
    """The loss of one optimizer step: the sum of ``value / scale`` over the backward calls (docs/spec.md section 2),
    CUDA parts read later (keys ``(self, index, field)``). ``parts``: ``[value, scale]`` per call (``None`` until
    read); ``divided``: every part was divided by the loop; ``broken``: a part could not be read. Training thread.
    """

    __slots__ = ("series", "parts", "divided", "scaled", "step", "t_s", "broken", "_missing")

    def __init__(self, series: str) -> None:
        self.series = series
        self.parts: list[list[float | None]] = []
        self.divided = True
        self.scaled = False
        self.step = 0
        self.t_s = 0.0
        self.broken = False
        self._missing = 0

    @classmethod
    def read(cls, series: str, value: float) -> StepLoss:
        """A step loss whose one part was already read on the host (ready once closed)."""
        loss = cls(series)
        loss.parts.append([value, 1.0])
        return loss

    def add(self, reader: ScalarReader, value: Any, scale: Any = None, *, divided: bool = False) -> None:
        """Add one backward call's 0-d ``value`` (and the GradScaler ``scale`` tensor, if any)."""
        index = len(self.parts)
        part: list[float | None] = [None, 1.0]
        self.parts.append(part)
        self.divided = self.divided and divided
        self._read(reader, value, index, 0)
        if scale is not None:
            self.scaled = True
            part[1] = None
            self._read(reader, scale, index, 1)

    def _read(self, reader: ScalarReader, value: Any, index: int, field: int) -> None:
        before = reader.pending
        got = reader.read(value, (self, index, field))
        if got is not None:
            self.parts[index][field] = got
        elif reader.pending > before:
            self._missing += 1
        else:
            self.broken = True  # a device with no sync-free read: leave this step's loss out

    def resolve(self, index: int, field: int, value: float) -> None:
        """A deferred read of part ``index`` completed."""
        self.parts[index][field] = value
        self._missing -= 1

    ready = property(lambda self: self._missing <= 0 or self.broken,
                     doc="Every part read (or known unreadable); a step loss is queued once its step closed it.")

    def value(self) -> float | None:
        """``sum(value / scale)`` over the parts, or ``None`` when one is missing or a scale is 0."""
        if self.broken or not self.parts:
            return None
        total = 0.0
        for value, scale in self.parts:
            if value is None or not scale:
                return None
            total += value / scale
        return total

    ambiguous = property(lambda self: len(self.parts) > 1 and not self.divided,
                         doc="Several backward calls without a division: full micro-batch losses or parts of one.")
