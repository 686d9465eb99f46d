"""The wrappers: a steady step reaches the monitor through a hot-state slot; backward reaches torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def test_the_step_hook_reads_the_step_read_slot_at_each_step_so_a_timing_wrapper_is_seen(tmp_path):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    seen = []
    try:
        for step in range(25):
            if step == 20:  # steady by now: the next step takes the short path
                plain = m.hot.step_read
                assert plain == m.on_step_read

                def timed(tokens, value):
                    seen.append(value)
                    m.hot.step_read = plain
                    plain(tokens, value)

                m.hot.step_read = timed
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
    finally:
        m.finish("completed")
    expected = model(torch.ones(2, 3)).pow(2).mean().item()  # lr 0: every step's loss
    assert m.steps == 25 and seen == [pytest.approx(expected)]
    assert m.hot.steady is False  # stopped: the short path is off until the next run


def test_a_backward_reaches_torch_with_its_gradient_and_leaves_no_flag_set(tmp_path):
    w = torch.ones(2, requires_grad=True)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        (w * 2).sum().backward()
        assert not m.hot.in_backward and torch.equal(w.grad, torch.full((2,), 2.0))
    finally:
        m.finish("completed")


def test_the_fast_call_honours_a_compiled_call_impl_set_on_the_module(tmp_path):
    """The fast path calls _call_impl itself for torch's own __call__: a module.compile()d one still runs compiled."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.lin(x)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    compiled = []
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for step in range(25):
            if step == 20:  # steady: the call takes the fast path; module.compile() sets this attribute
                model._compiled_call_impl = lambda *args, **kwargs: (compiled.append(args), model._call_impl(
                    *args, **kwargs))[1]
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
    finally:
        m.finish("completed")
    assert len(compiled) == 5 and m.steps == 25 and m.tokens == 25 * 2
