"""The ``counted`` convention: one forward and backward of a copy of the user's model under ``FlopCounterMode``.

What it counts, how the copy is made and how a LightningModule's ``training_step`` is counted: docs/spec.md section
5, "The counted pass". FLOPs per token when the batch has token ids, per sample otherwise. Reads the model only, on
the training thread between steps (compute/counted_pass.py runs the pass on the report worker). Never raises.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmeter.core.provenance import Derivation, Input

Method = Literal["auto", "meta", "real"]

Unit = Literal["tokens", "samples"]
Call = str
"""The call counted: ``"forward"`` (the module called), ``"training_step"`` (a LightningModule's), or the name of the
method a framework trains the model through (stable-baselines3's ``evaluate_actions``), every float output of
which is differentiated."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CountedFlops:
    """Result of one counted step: FLOP per ``unit`` (``tokens``: integer token ids; ``samples``: dim 0 of a float
    batch) or ``None`` (``reason``: why, or what failed before the pass that worked), the batch's ``count``, the
    step's ``total_flops``, which pass (``method``) on which ``copy`` and FLOPs per aten operator."""

    flops_per_unit: float | None
    unit: Unit = "tokens"
    count: int | None = None
    total_flops: int | None = None
    method: Literal["meta", "real"] | None = None
    copy: str | None = None
    reason: str | None = None
    by_operator: Mapping[str, int] = field(default_factory=dict, hash=False)

    def derivation(self) -> Derivation:
        """The count as a Derivation named ``flops_per_token.counted`` (unit FLOP/token or FLOP/sample)."""
        word = "token" if self.unit == "tokens" else "sample"
        how = f"{self.method or 'failed'} pass" + (f" on a {self.copy}" if self.copy and "copy" in self.copy else
                                                    f", {self.copy}" if self.copy else "")
        inputs = (Input(name="C", value=self.total_flops, unit="FLOP", provenance="counted",
                        source=f"FlopCounterMode, one forward+backward ({how})"),
                  Input(name="T" if self.unit == "tokens" else "B", value=self.count, unit=self.unit,
                        provenance="counted", source=f"{self.unit} in the example batch"))
        missing = None if self.flops_per_unit is not None else f"counted FLOPs unavailable: {self.reason}"
        return Derivation(name="flops_per_token.counted", formula="C / T" if self.unit == "tokens" else "C / B",
                          value=self.flops_per_unit, unit=f"FLOP/{word}", inputs=inputs, missing=missing)


def _map_tensors(obj: Any, fn: Callable[[Any], Any], torch: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        mapped = [_map_tensors(o, fn, torch) for o in obj]
        return type(obj)(mapped) if not hasattr(obj, "_fields") else type(obj)(*mapped)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn, torch) for k, v in obj.items()}
    return obj


def _scalar(out: Any, torch: Any, every: bool = False) -> Any:
    """A scalar to differentiate: ``out.loss`` / ``out["loss"]`` if present, else the sum of the first float tensor
    (``every``: the sum of every float tensor output, as a method's outputs all enter the loss)."""
    if every and isinstance(out, (list, tuple)):
        parts = [value.sum() for value in out if isinstance(value, torch.Tensor) and value.is_floating_point()]
        if parts:
            return sum(parts[1:], parts[0])
    loss = None if isinstance(out, torch.Tensor) else getattr(out, "loss", None)
    if loss is None and isinstance(out, Mapping):
        loss = out.get("loss")
    target = loss if isinstance(loss, torch.Tensor) else out
    if isinstance(target, torch.Tensor):
        return target if target.dim() == 0 else target.sum()
    values = out.values() if isinstance(out, Mapping) else out if isinstance(out, (list, tuple)) else ()
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.sum()
    raise TypeError(f"cannot find a tensor to differentiate in the model output ({type(out).__name__}); pass loss_fn")


@dataclass
class _QuietOnThread:
    """A stream that drops what one thread writes and passes every other thread's writes to ``_stream``."""

    _stream: Any
    _thread_id: int

    def write(self, text: str) -> int:
        return len(text) if threading.get_ident() == self._thread_id else self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _quiet(stack: contextlib.ExitStack) -> None:
    """Drop, on this thread only, what a ``training_step`` run on the copy prints and warns (its ``self.log``
    warns): ``sys.stdout``, ``sys.stderr`` and ``warnings.showwarning`` pass every other thread's output on, and
    the warning filters are left as they are."""
    me = threading.get_ident()
    saved = {name: getattr(sys, name) for name in ("stdout", "stderr")}
    shown = warnings.showwarning

    def show(*args: Any, **kwargs: Any) -> None:
        if threading.get_ident() != me:
            shown(*args, **kwargs)

    for name, stream in saved.items():
        if stream is not None:
            setattr(sys, name, _QuietOnThread(stream, me))
    warnings.showwarning = show

    def restore() -> None:
        for name, stream in saved.items():
            if isinstance(getattr(sys, name), _QuietOnThread):  # one set meanwhile by someone else stays
                setattr(sys, name, stream)
        if warnings.showwarning is show:
            warnings.showwarning = shown

    stack.callback(restore)


class _NoModuleHooks(contextlib.nullcontext):  # type: ignore[type-arg]
    """FlopCounterMode's module tracker, left out: no global module hook; every operator counts under "Global"."""

    parents = frozenset({"Global"})


def _copied(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
            meta: bool) -> tuple[Any, tuple[Any, ...], dict[str, Any], str]:
    """Copies of ``model`` and the batch (meta, or detached clones for ``real``): copy, args, kwargs, how copied."""
    import torch

    from trainmeter.compute.counted_pass import model_copy

    clone, how, why = model_copy(model, real=not meta)
    if clone is None:
        raise _NoCopy(why or "the model could not be copied")
    def fn(t: Any) -> Any:
        return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta") if meta else t.detach().clone()

    return clone, _map_tensors(args, fn, torch), _map_tensors(kwargs, fn, torch), how


def _counted_pass(clone: Any, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: Callable[[Any], Any] | None,
                  call: Call, *, on_training_thread: bool) -> tuple[int, dict[str, int]]:
    """One forward+backward of ``clone`` (ours) under the counter; (total, by operator). On the training thread
    the CPU RNG is forked (a real copy's dropout) and compiled code forced eager (``set_stance``: process-wide)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    if hasattr(counter, "mod_tracker"):
        counter.mod_tracker = _NoModuleHooks()
    with contextlib.ExitStack() as stack:
        if on_training_thread:
            stack.enter_context(torch.random.fork_rng(devices=[]))
            set_stance = getattr(torch.compiler, "set_stance", None)
            if set_stance is not None:
                stack.enter_context(set_stance("force_eager"))
        stack.enter_context(torch.enable_grad())
        if call == "training_step":
            _quiet(stack)
        stack.enter_context(counter)
        out = clone(*args, **kwargs) if call == "forward" else getattr(clone, call)(*args, **kwargs)
        loss = loss_fn(out) if loss_fn is not None else _scalar(out, torch, call not in ("forward", "training_step"))
        wrt = [p for p in clone.parameters() if p.requires_grad]
        if wrt and loss.requires_grad:
            torch.autograd.grad(loss, wrt, allow_unused=True)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), by_op


def _failure(exc: BaseException, call: Call) -> str:
    """Why a pass failed, in one line; a ``training_step`` that needs the trainer (absent on the copy) says so."""
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if call != "training_step":
        return text
    hint = (" (the copy has no trainer: a training_step that uses self.trainer, self.optimizers() or "
            "self.manual_backward cannot be counted)" if "Trainer" in text else
            " (a training_step runs on a meta copy only, never a copy with real values, so a step that reads "
            "a value, .item() or a print of a tensor, cannot be counted)" if "meta" in text else "")
    return f"the training_step of a copy of the LightningModule raised {text}{hint}"


class _NoCopy(Exception):
    """No copy of the model could be made: the pass is skipped (the message says why)."""


def counted_flops_per_token(model: Any, example_args: Any = (), example_kwargs: Mapping[str, Any] | None = None, *,
                            tokens: int | None = None, samples: int | None = None,
                            loss_fn: Callable[[Any], Any] | None = None, method: Method = "auto",
                            call: Call = "forward") -> CountedFlops:
    """Count one training step's FLOPs per token (or per sample) on a copy of ``model`` (wrappers read through) given
    one forward's (or ``call``'s: a ``training_step``, a method trained through) inputs; never raises.
    ``tokens``/``samples``: the batch's count (default as the run counts it); ``loss_fn``: output to the scalar
    differentiated (default ``output.loss``, else the first float output's sum, every one's for a method);
    ``method``: ``meta`` (allocate nothing), ``real`` (a CPU copy) or ``auto`` (meta, then real)."""
    found = _inputs(example_args, example_kwargs, tokens, samples, call, method)
    if isinstance(found, CountedFlops):
        return found
    args, kwargs, count, unit = found
    # a training_step runs on a meta copy only: on a real copy, what it does outside the module (a value it logs
    # itself, a file it writes) would be done again with real values (docs/spec.md section 5)
    passes = (["meta"] if call == "training_step" else ["meta", "real"]) if method == "auto" else [method]
    failures: list[str] = []
    for kind in passes:
        try:
            clone, copy_args, copy_kwargs, how = _copied(model, args, kwargs, meta=kind == "meta")
            total, by_op = _counted_pass(clone, copy_args, copy_kwargs, loss_fn, call, on_training_thread=True)
        except Exception as exc:  # noqa: BLE001 - never raise into training code
            failures.append(f"{kind} pass skipped: {exc}" if isinstance(exc, _NoCopy) else
                            f"{kind} pass failed: {_failure(exc, call)}")
            continue
        return _result(kind, total, by_op, how, call, unit, count, failures)
    return CountedFlops(flops_per_unit=None, unit=unit, count=count, reason="; ".join(failures))


def _inputs(example_args: Any, example_kwargs: Mapping[str, Any] | None, tokens: int | None, samples: int | None,
            call: Call, method: str) -> tuple[tuple[Any, ...], dict[str, Any], int | None, Unit] | CountedFlops:
    """The batch as positional and keyword inputs, and its count and unit; or the failure, as a result."""
    try:
        args = example_args if isinstance(example_args, tuple) else (
            tuple(example_args) if isinstance(example_args, list) else (example_args,))
        kwargs = dict(example_kwargs or {})
        if method not in ("auto", "meta", "real"):
            return CountedFlops(flops_per_unit=None, reason=f"unknown method {method!r}; valid: auto, meta, real")
        unit: Unit = "tokens"
        if tokens is not None:
            count: int | None = tokens
        elif samples is not None:
            count, unit = samples, "samples"
        else:
            from trainmeter.core.batch import count_batch  # as the run counts the batch

            found = count_batch(args[:1], {}) if call == "training_step" else count_batch(args, kwargs)
            count, unit = (None, "tokens") if found is None else (found[0], found[1])  # type: ignore[assignment]
    except Exception as exc:  # noqa: BLE001 - never raise into training code
        return CountedFlops(flops_per_unit=None, reason=f"{type(exc).__name__}: {exc}")
    return args, kwargs, count, unit


def _result(kind: str, total: int, by_op: dict[str, int], how: str, call: Call, unit: Unit, count: int | None,
            failures: list[str]) -> CountedFlops:
    """The result of a pass that ran on a copy made ``how`` (``failures``: the passes tried before it); the copy
    names the method counted where it is not the forward or a ``training_step``."""
    how = how if call in ("forward", "training_step") else f"{how}'s {call}"
    base = {"unit": unit, "count": count, "total_flops": total, "method": kind, "copy": how, "by_operator": by_op}
    why = ("FlopCounterMode counted 0 FLOPs (no operator with a FLOP formula ran)" if total <= 0 else
           "the example batch holds nothing its tokens or samples are read from: declare each batch with "
           "tm.batch(samples=...) or tm.batch(tokens=...)"
           if not count else None)
    return CountedFlops(flops_per_unit=None if why else total / count,  # type: ignore[operator, arg-type]
                        reason="; ".join([*failures, why] if why else failures) or None, **base)
