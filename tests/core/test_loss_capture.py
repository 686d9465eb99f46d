"""Loss capture: the division a loop made is read from the loss's grad_fn; the provenance says what was summed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainmeter.core.loss_capture import _divided  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def test_a_loss_divided_last_is_seen_as_divided():
    w = torch.ones(2, requires_grad=True)
    assert _divided((w.sum() / 4).grad_fn)
    assert not _divided(w.sum().grad_fn) and not _divided(None)


def _run(tmp_path, parts, divide):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for _ in range(4):
            for _ in range(parts):
                loss = model(torch.ones(2, 3)).pow(2).mean()
                (loss / parts if divide else loss).backward()
            opt.step()
    finally:
        m.finish("completed")
    return m.series_info["train_loss"]


def test_one_backward_per_step_is_described_as_the_value_passed_to_backward(tmp_path):
    info = _run(tmp_path, 1, divide=False)
    assert info["source"] == "loss capture: the value passed to backward" and info["ambiguous"] is False


def test_divided_accumulation_is_the_per_step_loss_and_undivided_is_ambiguous(tmp_path):
    divided = _run(tmp_path / "a", 2, divide=True)
    assert "up to 2" in divided["source"] and "per-step loss" in divided["note"] and not divided["ambiguous"]
    summed = _run(tmp_path / "b", 2, divide=False)
    assert summed["ambiguous"] is True and "ambiguous on 4 of 4 steps" in summed["note"]


def test_the_tokens_note_under_plain_accumulation_speaks_of_micro_batches_not_a_gan(run_root):
    import torch

    import trainmeter as tm

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(3):
            for _ in range(2):
                (model(torch.randn(2, 4)).pow(2).mean() / 2).backward()
            opt.step()
            opt.zero_grad()
    note = m.series_info["tokens_per_step"]["note"]
    assert "2 micro-batches per step (gradient accumulation)" in note and "GAN" not in note
