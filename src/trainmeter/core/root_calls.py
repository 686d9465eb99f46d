"""The root's training calls: each batch counted (tokens, the run's token-weighted S), one batch kept for the FLOP
count: the root's call arguments (docs/spec.md section 5, "The counted pass")."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from trainmeter.core.batch import BatchCounter, batch_seq, read_call, reading_seq, token_key


class TokenWeightedSeq:
    """Sum over the run of each batch's tokens times its S (dim 1 of 2-D token ids), on the probes' slow path only
    (docs/spec.md sections 5, "S", and 20). Training thread only."""

    __slots__ = ("weighted", "with_seq", "mark", "seq")

    def __init__(self) -> None:
        self.weighted: float = 0  # sum of tokens x S over closed runs
        self.with_seq = 0  # tokens of closed runs that had an S
        self.mark = 0  # the run's tokens when the open run began
        self.seq = 0  # S of the open run (0: its batches had no S: 1-D token ids, samples)

    def _closed(self, tokens: int) -> tuple[float, int]:
        """``weighted`` and ``with_seq`` once the open run closes with ``tokens`` counted."""
        more = tokens - self.mark if self.seq else 0
        return self.weighted + more * self.seq, self.with_seq + more

    def at(self, tokens: int, seq: int) -> None:
        """A batch of sequence length ``seq`` (0: none) is about to be counted, ``tokens`` counted before it."""
        if seq != self.seq:
            self.weighted, self.with_seq = self._closed(tokens)
            self.mark, self.seq = tokens, seq

    def mean(self, tokens: int) -> tuple[float, int] | None:
        """``(token-weighted S, tokens it is over)`` with ``tokens`` counted so far, or ``None`` (no S seen)."""
        weighted, with_seq = self._closed(max(tokens, self.mark))  # (tokens still pending at the read: left out)
        return (weighted / with_seq, with_seq) if with_seq > 0 else None


class RootCalls:
    """What the root's calls count: tokens, the token-weighted S, the example batch and its autocast dtype.

    Attributes:
        example: One training batch of the root ``(args, kwargs)`` for the FLOP count, or ``None``.
        example_declared: Its count where ``tm.batch`` declared it (``{"samples": n}`` or ``{"tokens": n}``: the
            first declaration of the step it was kept in), else empty.
        autocast_dtype: The autocast dtype in force at that batch, or ``None``.
        seq_weights: The run's token-weighted S (docs/spec.md section 5, "S").
        batches: The run's batch counter (lane 1's calls).
        unread: Why the first of the root's batches that could not be read could not (``None``: each was read).
        kind: What the counted samples are (``"graphs"``, ``"nodes"``), else ``""`` (the unit says it).
        declared: Whether the batches are declared (``tm.batch``): from then on none is counted.
        framework: The source of the framework's batch in progress, counted in its stead (:meth:`framework_batch`;
            the root's calls are not counted meanwhile), or ``None``.
        framework_counted: The source of the first framework batch counted (``"hf training_step inputs"``), or "".
        framework_unread: Why the first framework batch the rule could not read was not, or ``None``.

    Training thread (lane 1's).
    """

    def __init__(self, hot: Any, steps: Any, monitor: Any) -> None:
        self._hot = hot
        self._steps = steps
        self._monitor = monitor
        self.autocast_dtype: str | None = None
        self._first_declared: dict[str, int] = {}  # the first declaration of the step last declared
        self._example_at = -1  # the steps counted when the example was kept
        self.reset()

    def reset(self) -> None:
        """No batch kept, no S seen, none declared (a forked child's own run)."""
        self.example: tuple[Any, Any] | None = None
        self.seq_weights = TokenWeightedSeq()
        self.batches = BatchCounter()
        self.kind = ""
        self.unread: str | None = None
        self.declared = False
        self.framework: str | None = None
        self.framework_counted = ""
        self.framework_unread: str | None = None
        self._declared_at = -1  # the steps counted at the last declaration
        self.example_declared: dict[str, int] = {}

    def declare(self, count: int, unit: str) -> None:
        """``tm.batch``: a batch of ``count`` ``unit`` for the step in progress (docs/spec.md section 2, "The batch
        rule"). The step's first declaration replaces what was counted of it, later ones add (micro-batches); from
        the first one on no batch is counted."""
        hot, steps = self._hot, self._steps.steps
        if steps != self._declared_at:
            hot.pending_tokens = 0
            self._declared_at, self._first_declared = steps, {unit: count}
            if self._example_at == steps and self.example is not None:  # the kept batch's own count
                self.example_declared = self._first_declared
        hot.pending_tokens += count
        self._monitor.set_token_unit(unit)
        if not self.declared:
            self.declared = True
            hot.fast_calls = False
            self._hot.refresh()

    def framework_batch(self, batch: Any, source: str) -> None:
        """An adapter's: the framework's own batch for the step in progress (``None``: it is over), read by the batch
        rule (docs/spec.md section 2): read, it counts instead of the root's calls until it is over (micro-batches
        add up); unread, the root's calls count it. Nothing after ``tm.batch`` (a declaration wins)."""
        self.framework = None
        if batch is None or self.declared:
            return
        found = read_call((batch,), None)
        if type(found) is not tuple:
            self.framework_unread = self.framework_unread or f"{source} are {found}"
            return
        self._add(found[0], found[1], reading_seq(found), found[3])
        self.framework = source
        self.framework_counted = self.framework_counted or source
        if self._hot.fast_calls:  # the root's calls take the general path, which does not count them meanwhile
            self._hot.fast_calls = False
            self._hot.refresh()

    def read(self, args: Any, kwargs: Any) -> tuple[int, str] | None:
        """A watched module's training call's ``(count, unit)``; ``None`` when unread or counted already (not read)."""
        return None if self.declared or self.framework is not None else self.batches.count(args, kwargs)

    def new_root(self) -> None:
        """Another root was chosen: its own batch is kept next."""
        self.example = None
        self.autocast_dtype = None
        self.example_declared = {}

    def count(self, module: Any, args: Any, kwargs: Any, lightning: bool, counted: tuple[int, str] | None) -> None:
        """A training call of the root (``counted``: its batch's ``(count, unit)``, or ``None``)."""
        hot = self._hot
        if self.example is None:  # (a LightningModule's: its training_step (batch, batch_idx)) for the counted FLOPs
            self.example = (args, dict(kwargs or {}))
            self.autocast_dtype = autocast()
            self._kept()
        elif lightning and self.autocast_dtype is None:  # its precision plugin's autocast is on here
            self.autocast_dtype = autocast()
        if self.declared or self.framework is not None:  # counted already (tm.batch, the framework's batch)
            counted = None
        elif counted is not None:
            self._add(counted[0], counted[1], self.batches.seq, self.batches.kind)
        elif self.unread is None:
            self.unread = self.batches.unread
        # a positional batch's shape, or a keyword-only one's keyword and shape: the fast call counts the next alike
        first, key = None, None
        if lightning or counted is None:
            pass
        elif not kwargs:
            first = args[0] if args else None
        elif not args:
            key = token_key(kwargs)
            first = kwargs[key[0]] if key is not None else None
        if hasattr(first, "is_floating_point") and first.shape:  # (a 0-d one is skipped: the count is not its)
            hot.last_type, hot.last_shape, hot.last_dtype = type(first), first.shape, first.dtype
            hot.last_key, hot.last_before = key if key is not None else (None, ())
            hot.last_tokens = counted[0]
            hot.fast_calls = self.example is not None
        else:
            hot.fast_calls = False
        hot.refresh()
        hot.calls += 1
        callback = hot.on_training
        if callback is not None and (lightning or module.training):
            callback()

    def credit(self, candidate: Any) -> None:
        """The root was found at a step: its batches of that step (seen as a candidate's) count, its first is kept."""
        example = candidate.example
        hot = self._hot
        if self.declared:  # what was declared of this step stands
            pass
        elif candidate.unit:  # S of the first step: its first batch's; kind: the last batch read's (the root's)
            seq = batch_seq(example[0], example[1]) if example is not None and candidate.unit == "tokens" else None
            self._add(candidate.tokens, candidate.unit, seq, self.batches.kind)
        elif candidate.calls and self.unread is None:
            self.unread = self.batches.unread
        hot.calls += candidate.calls
        if example is not None:
            self.example = example[:2]
            self.autocast_dtype = example[2]
            self._kept()

    def _add(self, count: int, unit: str, seq: float | None, kind: str) -> None:
        """Count a batch of ``count`` ``unit`` for the step in progress (``seq``: its S, ``None``: S unchanged)."""
        if seq is not None:
            self.seq_weights.at(self._steps.tokens + self._hot.pending_tokens, seq)
        self._hot.pending_tokens += count
        self._monitor.set_token_unit(unit)
        self.kind = kind

    def warn_unread(self) -> None:
        """At the end: a run whose root's batches were not read and that counted nothing warns once."""
        if self.unread is not None and not self.declared and self._steps.steps and not self._steps.tokens:
            self._monitor.warn_once("batch-unread", (
                f"the batches of the trained model are {self.unread}, which trainmeter cannot read: its samples "
                "and tokens are unknown; declare each batch with tm.batch(samples=...) or tm.batch(tokens=...)"))

    def _kept(self) -> None:
        """A batch was kept: its count is the first one declared in its step, if any."""
        self._example_at = steps = self._steps.steps
        self.example_declared = self._first_declared if self._declared_at == steps else {}

    def release_example(self) -> None:
        """Drop the kept batch (after the FLOP count): an empty example, not ``None``, so none other is kept."""
        self.example = None if self.example is None else ((), {})


def autocast() -> str | None:
    """The autocast dtype in force on this thread (CUDA's, else the CPU's), or ``None``."""
    with suppress(Exception):
        import torch

        for device in ("cuda", "cpu"):
            if torch.is_autocast_enabled(device):
                return str(torch.get_autocast_dtype(device))
    return None
