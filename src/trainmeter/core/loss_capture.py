"""Loss capture: the values passed to backward between optimizer steps, summed and described (docs/spec.md §2)."""

from __future__ import annotations

import weakref
from typing import Any

from trainmeter.core.scalars import StepLoss
from trainmeter.core.steps import LOSS_SERIES

TOKENS_SERIES = "tokens_per_step"


def _divided(grad_fn: Any) -> bool:
    """Whether a loss was divided last (``loss / k``: a ``DivBackward`` node)."""
    return grad_fn is not None and type(grad_fn).__name__.startswith("DivBackward")


def add_part(loss: StepLoss, reader: Any, tensor: Any, holder: Any) -> None:
    """Add one backward call's 0-d ``tensor`` to ``loss`` (every lane's rule), divided by the GradScaler scale when
    it is the loss ``GradScaler.scale`` returned (``holder.scaled``: a weak reference to it, the scale tensor, whether
    the loss was divided before scaling; then used up; docs/spec.md section 2, "Loss")."""
    scaled = holder.scaled
    if scaled is not None and scaled[0]() is tensor:
        loss.add(reader, tensor, scaled[1], divided=scaled[2])
        holder.scaled = None
        return
    loss.add(reader, tensor, divided=_divided(tensor.grad_fn))


class LossCapture:
    """A step's loss from its backward calls, and the provenance of ``train_loss``. Training thread (lane 1's).

    ``step_loss``: the step's loss parts on the general path (a :class:`StepLoss`), or ``None``; ``scaled``: the loss
    ``GradScaler.scale`` returned on lane 1's thread, ``(weak reference, scale tensor, divided)``, divided out at its
    backward, or ``None``; ``unstepped``: at stop, a loss was passed to backward after the last step (or with none).
    """

    def __init__(self, hot: Any, monitor: Any, threads: Any) -> None:
        self._hot = hot
        self._monitor = monitor
        self._threads = threads
        self.reset()
        self._info = {"steps": 0, "ambiguous": 0, "divided": 0, "scaled": 0, "max_parts": 0}
        self.unstepped = False

    def reset(self) -> None:
        """No loss pending (construction; a forked child's own run; a stop; a fault)."""
        self.step_loss: StepLoss | None = None
        self._hot.clear_fast_loss()
        self.scaled: tuple[Any, Any, bool] | None = None

    def stop(self) -> None:
        self.unstepped = self.backward_seen()
        self.reset()

    def fault(self, exc: BaseException) -> None:
        """Loss capture failed: warn once and stop capturing (training thread)."""
        self._monitor.warn_once("probe-loss", f"loss capture disabled: {exc!r}")
        self._hot.switch(capture_on=False, backward_on=False)
        self.reset()

    def on_backward(self, tensors: Any) -> None:
        """A backward call's 0-d tensors are parts of the step's loss (the backward wrapper's general path)."""
        lane = self._threads.thread_lane()  # another training thread than lane 1's (core/probe_state.py ProbeThreads)
        if lane is not None:
            self._threads.lane_backward(lane, tensors)
            return
        try:
            for tensor in tensors if isinstance(tensors, (tuple, list)) else (tensors,):
                if getattr(tensor, "ndim", None) != 0:
                    continue
                loss = self.step_loss
                if loss is None:
                    loss = self.step_loss = self.fast_loss()
                    self._hot.fast_backward = False  # the step's loss is a StepLoss now (until the step)
                    self._hot.steady = False
                add_part(loss, self._monitor.steps_state.scalars, tensor, self)
            callback = self._hot.on_training
            if callback is not None:
                callback()
        except Exception as exc:
            self.fault(exc)

    def note_scaled(self, out: Any, scale: Any, loss: Any) -> None:
        """``out``: ``loss`` times ``scale`` (GradScaler.scale's); divided out at its backward in the calling thread."""
        scaled = (weakref.ref(out), scale, _divided(getattr(loss, "grad_fn", None)))
        self._hot.fast_backward = False  # the backward of ``out`` takes the general path, which divides it out
        lane = self._threads.current()
        if lane is not None and not lane.hot:
            lane.scaled = scaled
            return
        self.scaled = scaled

    def fast_division(self, tensor: Any) -> None:
        """Fold the held first part's and ``tensor``'s division into ``fast_divided`` (steps of several parts)."""
        hot = self._hot
        first = hot.fast_first
        if first is not None:
            hot.fast_first = None
            hot.fast_divided = hot.fast_divided and _divided(first.grad_fn)
        hot.fast_divided = hot.fast_divided and _divided(tensor.grad_fn)

    def fast_loss(self) -> StepLoss:
        """A StepLoss holding the parts read on the fast path so far (then reset)."""
        hot = self._hot
        loss = StepLoss(LOSS_SERIES)
        parts = hot.fast_parts
        if parts:
            # the sum as the first part and zeros for the others: the same value and the same part count
            loss.parts.extend([[hot.fast_sum, 1.0]] + [[0.0, 1.0] for _ in range(parts - 1)])
            first = hot.fast_first
            if first is not None:  # one part so far: its division not yet read
                hot.fast_divided = _divided(first.grad_fn)
            loss.divided = hot.fast_divided
        hot.clear_fast_loss()
        return loss

    def take(self) -> StepLoss | None:
        """The step's loss on the general path (``None`` when its parts were read on the fast path), then none."""
        loss, self.step_loss = self.step_loss, None
        self._hot.refresh()  # the next loss may take the backward fast path
        return loss

    def take_fast(self) -> float:
        """The value of a step's loss read on the backward fast path (its parts counted in), then none."""
        hot = self._hot
        parts, value = hot.fast_parts, hot.fast_sum
        self._count(parts, hot.fast_divided, parts > 1 and not hot.fast_divided, False)
        hot.clear_fast_loss()
        return value

    def note(self, loss: StepLoss) -> None:  # a general path's step loss, in the provenance counts
        self._count(len(loss.parts), loss.divided, loss.ambiguous, loss.scaled)

    def _count(self, parts: int, divided: bool, ambiguous: bool, scaled: bool) -> None:
        info = self._info
        info["steps"] += 1
        info["max_parts"] = max(info["max_parts"], parts)
        info["ambiguous"] += ambiguous
        info["divided"] += divided and parts > 1
        info["scaled"] += scaled

    def backward_seen(self) -> bool:
        """Whether a loss was passed to backward since the last counted step (or ever, with no step)."""
        return self.step_loss is not None or bool(self._hot.fast_parts) or self.unstepped

    def write_info(self, describe: Any, steady_steps: int, others: list[int]) -> dict[str, int]:
        """The ``series_info`` entries of ``train_loss`` (``steady_steps``: the step hook's, their loss read at
        backward; ``others``: the other optimizers' numbers). Returns the counts."""
        n = dict(self._info)
        n["steps"] += steady_steps
        if n["steps"]:
            how = "the value passed to backward" if n["max_parts"] <= 1 else \
                f"the sum of the values passed to backward between optimizer steps (up to {n['max_parts']})"
            notes = (n["divided"] and "the loop divided each micro-batch loss (gradient accumulation), so the sum is "
                                      "the per-step loss",
                     n["scaled"] and "each divided by the GradScaler scale that multiplied it",
                     n["ambiguous"] and f"ambiguous on {n['ambiguous']} of {n['steps']} steps: several backward "
                                        "calls without a division; shown is their sum (the loss whose gradient the "
                                        "step applied); if each was a full micro-batch loss, the per-step mean is the "
                                        "sum divided by the number of calls")
            describe(LOSS_SERIES, {"provenance": "measured", "source": f"loss capture: {how}",
                                   "ambiguous": bool(n["ambiguous"]), "note": "; ".join(filter(None, notes))},
                     replace=False)
        for number in others:
            describe(f"{LOSS_SERIES}.optimizer{number}", {
                "provenance": "measured",
                "source": f"loss capture: values passed to backward before a step of optimizer {number} "
                          "(not the primary optimizer, whose steps are counted)"}, replace=False)
        return n

