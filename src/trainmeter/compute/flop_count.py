"""The ``counted`` convention: one forward and backward of the user's model under ``FlopCounterMode``.

What it counts, and where it differs from the analytic conventions of
:mod:`trainmeter.compute.flops`:

- Executed FLOPs from operator shapes (matmuls, convolutions, attention
  kernels with a FLOP formula): 2 per multiply-add, forward and backward.
  Elementwise ops, norms, softmax, biases, embedding lookups and the optimizer
  step are not counted, so it lands near ``hf``/``titan`` for a decoder.
- Causal attention is counted over the full square: the SDPA FLOP formulas
  ignore ``is_causal`` (so it sits above ``megatron``, which halves attention).
- On the meta device, ``scaled_dot_product_attention`` decomposes to plain
  ``bmm`` calls, counted over the full square. On a real CPU tensor the fused
  CPU kernel has no FLOP formula and attention counts 0 (pytorch/pytorch#195460).
- Activation checkpointing re-runs the forward inside backward and is counted
  again (hardware FLOPs, not model FLOPs). A tied head counts once per use.
- A mixture-of-experts model counts the experts the example batch was routed
  to; on the meta device routing is not real, so the count may differ.

The count runs through ``torch.func.functional_call``: first (``method="meta"``
or ``"auto"``) with meta copies of parameters, buffers and inputs, which
allocates nothing and leaves the model untouched; then (``"real"``, or
``"auto"`` after a meta failure) with the real parameters and inputs, using
``torch.autograd.grad`` so no ``.grad`` is written, cloned buffers so running
statistics do not move, and a forked RNG so dropout does not shift the
training's random stream. The real path costs one extra step of compute and
activation memory. Module hooks still run during either pass.

Thread safety: ``functional_call`` swaps the module's parameters for the
duration of the call, so call this on the training thread, between steps.
Never raises: a failure gives ``flops_per_token=None`` and a ``reason``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmeter.core.provenance import Derivation, Input

Method = Literal["auto", "meta", "real"]

NOTE = (
    "executed FLOPs from operator shapes (FlopCounterMode), one forward and backward: includes recompute, "
    "counts attention over the full square, not model FLOPs"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CountedFlops:
    """Result of one counted step.

    Attributes:
        flops_per_token: Counted FLOP per token, or ``None`` (see ``reason``).
        total_flops: FLOPs counted for the whole step (forward plus backward), or ``None``.
        tokens: Tokens in the example batch, or ``None`` when unknown.
        method: ``"meta"`` or ``"real"``: which pass produced the count.
        reason: Why there is no count, or what failed before the pass that worked.
        by_operator: Counted FLOPs per aten operator (``"aten.mm"`` -> FLOP).
        note: What the counted figure means (for the UI).
    """

    flops_per_token: float | None
    total_flops: int | None = None
    tokens: int | None = None
    method: Literal["meta", "real"] | None = None
    reason: str | None = None
    by_operator: Mapping[str, int] = field(default_factory=dict, hash=False)
    note: str = NOTE

    def derivation(self) -> Derivation:
        """Return the count as a Derivation named ``flops_per_token.counted`` (FLOP/token)."""
        inputs = (
            Input(
                name="C",
                value=self.total_flops,
                unit="FLOP",
                provenance="counted",
                source=f"FlopCounterMode, one forward+backward ({self.method or 'failed'} pass)",
            ),
            Input(
                name="T", value=self.tokens, unit="tokens", provenance="counted", source="tokens in the example batch"
            ),
        )
        return Derivation(
            name="flops_per_token.counted",
            formula="C / T",
            value=self.flops_per_token,
            unit="FLOP/token",
            inputs=inputs,
            missing=None if self.flops_per_token is not None else f"counted FLOPs unavailable: {self.reason}",
        )


def _map_tensors(obj: Any, fn: Callable[[Any], Any], torch: Any) -> Any:
    """Apply ``fn`` to every tensor inside nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        mapped = [_map_tensors(o, fn, torch) for o in obj]
        return type(obj)(mapped) if not hasattr(obj, "_fields") else type(obj)(*mapped)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn, torch) for k, v in obj.items()}
    return obj


def _tokens(args: tuple[Any, ...], kwargs: Mapping[str, Any], torch: Any) -> int | None:
    """Tokens of the batch: ``input_ids`` if given, else the first integer tensor with at least one dimension."""
    candidates = [kwargs.get("input_ids"), *args, *kwargs.values()]
    for obj in candidates:
        if (
            isinstance(obj, torch.Tensor)
            and obj.dim() >= 1
            and not obj.is_floating_point()
            and not obj.is_complex()
            and obj.dtype != torch.bool
        ):
            return int(obj.numel())
    return None


def _scalar(out: Any, torch: Any) -> Any:
    """A scalar to differentiate: ``out.loss`` / ``out["loss"]`` if present, else the sum of the first float tensor."""
    loss = None if isinstance(out, torch.Tensor) else getattr(out, "loss", None)
    if loss is None and isinstance(out, Mapping):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss if loss.dim() == 0 else loss.sum()
    if isinstance(out, torch.Tensor):
        return out if out.dim() == 0 else out.sum()
    values = out.values() if isinstance(out, Mapping) else out if isinstance(out, (list, tuple)) else ()
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.sum()
    raise TypeError(f"cannot find a tensor to differentiate in the model output ({type(out).__name__}); pass loss_fn")


def _one_pass(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: Callable[[Any], Any] | None, meta: bool
) -> tuple[int, dict[str, int]]:
    """Run one forward+backward under FlopCounterMode; return (total FLOPs, FLOPs by operator)."""
    import torch
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    root = getattr(model, "_orig_mod", model)
    params = dict(root.named_parameters())
    buffers = dict(root.named_buffers())
    if meta:
        to_meta = lambda t: torch.empty_like(t, device="meta")  # noqa: E731
        p_map = {k: to_meta(v.detach()).requires_grad_(v.requires_grad) for k, v in params.items()}
        b_map = {k: to_meta(v) for k, v in buffers.items()}
        args = _map_tensors(args, lambda t: to_meta(t.detach()), torch)
        kwargs = _map_tensors(kwargs, lambda t: to_meta(t.detach()), torch)
    else:
        p_map = dict(params)
        b_map = {k: v.clone() for k, v in buffers.items()}
    cuda = sorted({t.device.index or 0 for t in [*params.values(), *buffers.values()] if t.device.type == "cuda"})
    counter = FlopCounterMode(display=False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=cuda))
        set_stance = getattr(torch.compiler, "set_stance", None)
        if set_stance is not None:
            stack.enter_context(set_stance("force_eager"))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(counter)
        out = functional_call(root, {**p_map, **b_map}, args, kwargs, strict=False)
        loss = loss_fn(out) if loss_fn is not None else _scalar(out, torch)
        wrt = [p for p in p_map.values() if p.requires_grad]
        if wrt and loss.requires_grad:
            torch.autograd.grad(loss, wrt, allow_unused=True)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), by_op


def counted_flops_per_token(
    model: Any,
    example_args: Any = (),
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    tokens: int | None = None,
    loss_fn: Callable[[Any], Any] | None = None,
    method: Method = "auto",
) -> CountedFlops:
    """Count one training step's FLOPs per token with ``torch.utils.flop_counter.FlopCounterMode``.

    Args:
        model: The ``torch.nn.Module`` (a ``torch.compile`` wrapper is read through ``_orig_mod``).
        example_args: Positional inputs of one forward (a tuple, or a single tensor).
        example_kwargs: Keyword inputs of one forward.
        tokens: Tokens in the example batch; default: ``input_ids`` or the first
            integer tensor's element count (batch x sequence).
        loss_fn: Maps the model output to a scalar to differentiate; default:
            ``output.loss`` if present, else the sum of the (first) float output.
        method: ``"meta"`` (allocate nothing), ``"real"`` (run on the real
            tensors) or ``"auto"`` (meta, then real if meta fails).

    Returns:
        A :class:`CountedFlops`; never raises.
    """
    try:
        import torch

        args = (
            example_args
            if isinstance(example_args, tuple)
            else (tuple(example_args) if isinstance(example_args, list) else (example_args,))
        )
        kwargs = dict(example_kwargs or {})
        n_tokens = tokens if tokens is not None else _tokens(args, kwargs, torch)
        if method not in ("auto", "meta", "real"):
            return CountedFlops(flops_per_token=None, reason=f"unknown method {method!r}; valid: auto, meta, real")
    except Exception as exc:  # noqa: BLE001 - never raise into training code
        return CountedFlops(flops_per_token=None, reason=f"{type(exc).__name__}: {exc}")
    failures: list[str] = []
    passes = ["meta", "real"] if method == "auto" else [method]
    for kind in passes:
        try:
            total, by_op = _one_pass(model, args, kwargs, loss_fn, meta=kind == "meta")
        except Exception as exc:  # noqa: BLE001 - never raise into training code
            failures.append(f"{kind} pass failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        reason = "; ".join(failures) or None
        if total <= 0:
            why = "FlopCounterMode counted 0 FLOPs (no operator with a FLOP formula ran)"
            return CountedFlops(
                flops_per_token=None,
                total_flops=total,
                tokens=n_tokens,
                method=kind,  # type: ignore[arg-type]
                reason="; ".join([*failures, why]),
                by_operator=by_op,
            )
        if not n_tokens:
            why = "tokens in the example batch unknown: pass tokens="
            return CountedFlops(
                flops_per_token=None,
                total_flops=total,
                tokens=None,
                method=kind,  # type: ignore[arg-type]
                reason="; ".join([*failures, why]),
                by_operator=by_op,
            )
        return CountedFlops(
            flops_per_token=total / n_tokens,
            total_flops=total,
            tokens=n_tokens,
            method=kind,
            reason=reason,
            by_operator=by_op,
        )  # type: ignore[arg-type]
    return CountedFlops(flops_per_token=None, tokens=n_tokens, reason="; ".join(failures))
