"""The clip tap: keeps what the loop's clip call returned, says why there is no norm, restores torch."""

import threading

import pytest
import torch
import torch.nn as nn

from trainmeter.optim.grad_norm import REASON_BY_VALUE, REASON_NO_CLIP, REASON_NOT_PLAIN, ClipTap


def _param(grad=3.0):
    p = nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), grad)
    return p


def test_the_returned_norm_is_kept_unchanged_and_taken_once():
    tap = ClipTap()
    tap.install(torch)
    try:
        returned = torch.nn.utils.clip_grad_norm_([_param()], 1.0)
        assert tap.pending is returned and float(returned) == pytest.approx(6.0)
        assert tap.take_at(0) is returned and tap.take_at(0) is None  # no step counter: kept at step -1
        assert tap.missing_reason() is None
    finally:
        tap.remove()


def test_reasons_when_there_is_no_norm():
    tap = ClipTap()
    assert tap.missing_reason() == REASON_NO_CLIP
    tap.install(torch)
    try:
        torch.nn.utils.clip_grad_value_([_param()], 0.5)
        assert tap.missing_reason() == REASON_BY_VALUE
    finally:
        tap.remove()


def test_a_norm_that_is_not_a_plain_tensor_or_float_is_not_read():
    tap = ClipTap()
    tap._tensor_type = torch.Tensor
    tap._note_norm(object())
    assert tap.pending is None and tap.missing_reason() == REASON_NOT_PLAIN


class Replicate:
    pass


class Partial:
    pass


class DTensor:
    """Stands for torch.distributed.tensor.DTensor: a norm with placements and a local tensor."""

    def __init__(self, placements):
        self.placements = placements
        self.local = torch.tensor(5.0)

    def to_local(self):
        return self.local


def test_a_replicated_dtensor_norm_is_read_through_its_local_tensor_and_a_partial_one_is_not():
    tap = ClipTap()
    tap._tensor_type = torch.Tensor
    replicated = DTensor((Replicate(),))
    tap._note_norm(replicated)
    assert tap.pending is replicated.local and tap.missing_reason() is None
    tap = ClipTap()
    tap._tensor_type = torch.Tensor
    tap._note_norm(DTensor((Partial(),)))
    assert tap.pending is None and tap.missing_reason() == REASON_NOT_PLAIN and "collective" in REASON_NOT_PLAIN


def test_calls_from_another_thread_are_not_kept():
    tap = ClipTap()
    tap.install(torch)
    try:
        worker = threading.Thread(target=lambda: torch.nn.utils.clip_grad_norm_([_param()], 1.0))
        worker.start()
        worker.join()
        assert tap.pending is None and tap.norm_calls == 0
    finally:
        tap.remove()


def test_remove_restores_torch_and_is_idempotent():
    before = (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_,
              torch.nn.utils.clip_grad_value_, torch.nn.utils.clip_grad.clip_grad_value_)
    tap = ClipTap()
    wrapped = tap.install(torch)
    assert "torch.nn.utils.clip_grad_norm_" in wrapped
    tap.remove()
    tap.remove()
    assert (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_,
            torch.nn.utils.clip_grad_value_, torch.nn.utils.clip_grad.clip_grad_value_) == before


def test_the_two_step_form_keeps_the_total_norm_it_was_handed():
    tap = ClipTap()
    tap.install(torch)
    try:
        params = [_param()]
        total = torch.nn.utils.get_total_norm([p.grad for p in params])
        torch.nn.utils.clip_grads_with_norm_(params, 1.0, total)
        assert tap.pending is total and float(total) == pytest.approx(6.0) and tap.norm_calls == 1
        assert float(params[0].grad.norm()) == pytest.approx(1.0, rel=1e-5)  # the clip itself still happened
        torch.nn.utils.clip_grads_with_norm_(params, max_norm=1.0, total_norm=torch.tensor(2.5))
        assert float(tap.pending) == 2.5 and tap.norm_calls == 2
    finally:
        tap.remove()


def test_torch_s_own_clip_grad_norm_is_one_call_not_two():
    tap = ClipTap()
    tap.install(torch)
    try:
        returned = torch.nn.utils.clip_grad_norm_([_param()], 1.0)
        assert tap.norm_calls == 1 and tap.pending is returned
    finally:
        tap.remove()


def test_an_accelerator_imported_during_the_run_gives_its_norm_once_also_with_an_infinite_limit(monkeypatch):
    import sys
    import types

    class Accelerator:  # stands for accelerate 1.x: the two-step form, no clip with an infinite limit
        def clip_grad_norm_(self, parameters, max_norm, norm_type=2):
            params = list(parameters)
            total = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type)
            if max_norm != float("inf"):
                torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
            return total

    original = Accelerator.clip_grad_norm_
    monkeypatch.delitem(sys.modules, "accelerate.accelerator", raising=False)
    tap = ClipTap()
    tap.install(torch)
    try:
        module = types.ModuleType("accelerate.accelerator")
        module.Accelerator = Accelerator
        tap._wrap_accelerate(module)  # what the import hook calls once the module is imported
        assert "accelerate.Accelerator.clip_grad_norm_" in tap.wrapped
        norm = Accelerator().clip_grad_norm_([_param()], 1.0)
        assert tap.norm_calls == 1 and tap.pending is norm
        norm = Accelerator().clip_grad_norm_([_param(grad=1.0)], float("inf"))
        assert tap.norm_calls == 2 and tap.pending is norm and float(norm) == pytest.approx(2.0)
    finally:
        tap.remove()
    assert Accelerator.clip_grad_norm_ is original
    assert torch.nn.utils.clip_grads_with_norm_ is torch.nn.utils.clip_grad._clip_grads_with_norm_  # torch's own again
