"""Loss capture: the values passed to backward between optimizer steps, summed and described (docs/spec.md §2)."""

from __future__ import annotations

from typing import Any

from trainmeter.core.scalars import StepLoss

LOSS_SERIES = "train_loss"
TOKENS_SERIES = "tokens_per_step"


def _divided(grad_fn: Any) -> bool:
    """Whether a loss was divided last (``loss / k``: a ``DivBackward`` node)."""
    return grad_fn is not None and type(grad_fn).__name__.startswith("DivBackward")


def add_part(loss: StepLoss, reader: Any, tensor: Any, scaled: tuple[Any, Any, bool] | None) -> bool:
    """Add one backward call's 0-d ``tensor`` to ``loss``, divided by the GradScaler scale when it is the loss
    ``GradScaler.scale`` returned (``scaled``: a weak reference to it, the scale tensor, whether the loss was divided
    before scaling; docs/spec.md section 2, "Loss"). Lane 1 and every other lane use this one rule.

    Returns:
        Whether ``scaled`` was used (the caller then forgets it).
    """
    if scaled is not None and scaled[0]() is tensor:
        loss.add(reader, tensor, scaled[1], divided=scaled[2])
        return True
    loss.add(reader, tensor, divided=_divided(tensor.grad_fn))
    return False



class LossCapture:
    """A step's loss from its backward calls, and the provenance of ``train_loss`` and ``tokens_per_step``
    (a part of :class:`~trainmeter.core.probes.TorchProbes`). Training thread."""

    _loss: StepLoss | None

    def _backward_fault(self, exc: BaseException) -> None:
        """Loss capture failed: warn once and stop capturing (training thread)."""
        self._monitor.warn_once("probe-loss", f"loss capture disabled: {exc!r}")
        self.hot.backward_on = self._capture_on = False
        self._refresh_fast()
        self._loss = None
        self.hot.clear_fast_loss()

    def _on_backward(self, tensors: Any) -> None:
        lane = self._thread_lane()  # another training thread than lane 1's (core/lane_probes.py)
        if lane is not None:
            self._lane_backward(lane, tensors)
            return
        try:
            items = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
            for tensor in items:
                if getattr(tensor, "ndim", None) != 0:
                    continue
                loss = self._loss
                if loss is None:
                    loss = self._loss = self._fast_loss()
                    self.hot.fast_backward = False  # the step's loss is a StepLoss now (until the step)
                    self.hot.steady = False
                if add_part(loss, self._monitor.scalar_reader, tensor, self._scaled):
                    self._scaled = None
            callback = self._on_training
            if callback is not None:
                callback()
        except Exception as exc:
            self._backward_fault(exc)

    def _fast_division(self, tensor: Any) -> None:
        """Fold the held first part's and ``tensor``'s division into ``_fast_divided`` (steps of several parts)."""
        first = self.hot.fast_first
        if first is not None:
            self.hot.fast_first = None
            self.hot.fast_divided = self.hot.fast_divided and _divided(first.grad_fn)
        self.hot.fast_divided = self.hot.fast_divided and _divided(tensor.grad_fn)

    def _fast_loss(self) -> StepLoss:
        """A StepLoss holding the parts read on the fast path so far (then reset)."""
        loss = StepLoss(LOSS_SERIES)
        parts = self.hot.fast_parts
        if parts:
            # the sum as the first part and zeros for the others: the same value and the same part count
            loss.parts.extend([[self.hot.fast_sum, 1.0]] + [[0.0, 1.0] for _ in range(parts - 1)])
            first = self.hot.fast_first
            if first is not None:  # one part so far: its division not yet read
                self.hot.fast_divided = _divided(first.grad_fn)
            loss.divided = self.hot.fast_divided
        self.hot.clear_fast_loss()
        return loss


    def _note(self, loss: StepLoss) -> None:
        info = self._losses_info
        info["steps"] += 1
        info["max_parts"] = max(info["max_parts"], len(loss.parts))
        info["ambiguous"] += loss.ambiguous
        info["divided"] += loss.divided and len(loss.parts) > 1
        info["scaled"] += loss.scaled

    # -- provenance ----------------------------------------------------------------
    def _write_info(self) -> None:
        """``series_info`` entries for ``train_loss`` and ``tokens_per_step``."""
        info = self._monitor.series_info
        n = dict(self._losses_info)
        n["steps"] += self._steps.steps - self._general_steps  # the step hook's steady steps (their loss read)
        if n["steps"] and LOSS_SERIES not in info:
            how = "the value passed to backward" if n["max_parts"] <= 1 else \
                f"the sum of the values passed to backward between optimizer steps (up to {n['max_parts']})"
            notes = []
            if n["divided"]:
                notes.append("the loop divided each micro-batch loss (gradient accumulation), so the sum "
                             "is the per-step loss")
            if n["scaled"]:
                notes.append("each divided by the GradScaler scale that multiplied it")
            if n["ambiguous"]:
                notes.append(f"ambiguous on {n['ambiguous']} of {n['steps']} steps: several backward calls "
                             "without a division; shown is their sum (the loss whose gradient the step "
                             "applied); if each was a full micro-batch loss, the per-step mean is the sum "
                             "divided by the number of calls")
            info[LOSS_SERIES] = {"provenance": "measured", "source": f"loss capture: {how}",
                                 "ambiguous": bool(n["ambiguous"]), "note": "; ".join(notes)}
        for number in sorted(set(self._others.values())):
            info.setdefault(f"{LOSS_SERIES}.optimizer{number}", {
                "provenance": "measured",
                "source": f"loss capture: values passed to backward before a step of optimizer {number} "
                          "(not the primary optimizer, whose steps are counted)"})
        if self._roots_found:
            notes = []
            if self._max_calls > 1 and n["max_parts"] >= self._max_calls and n["divided"] and not n["ambiguous"]:
                # a divided backward per call: micro-batches of gradient accumulation
                notes.append(f"up to {self._max_calls} micro-batches per step (gradient accumulation); each "
                             "micro-batch counts")
            elif self._max_calls > 1:
                notes.append(f"the model was called up to {self._max_calls} times per step; each call's batch "
                             "counts (a GAN's discriminator on real and generated samples counts both)")
            if self._first_step_missed:
                notes.append("counted from step 2: the optimizer was built before the run where it could "
                             "not be seen (pass model= to count step 1)")
            info[TOKENS_SERIES] = {"provenance": "counted",
                                   "source": f"batches of {self.root_name} called with gradients enabled",
                                   "note": "; ".join(notes)}
