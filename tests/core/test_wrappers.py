"""The wrappers: a steady step reaches the one step rule; backward reaches torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def _linear_run(tmp_path):
    """A Linear(3, 1) model, its SGD (lr 0: the weights stay) and a started core-only monitor without text."""
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    return model, opt, m


def test_the_timing_hook_times_the_next_steady_step_only_and_every_step_goes_through_one_rule(tmp_path):
    """The overhead wing's timing: Monitor.time_next_step times the step rule on the next step, steady or not."""
    model, opt, m = _linear_run(tmp_path)
    seen = []
    try:
        for step in range(25):
            if step == 20:  # steady by now: the next step takes the short path
                m.context.time_next_step(lambda run_step: (run_step(), seen.append(m.steps)))
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
    finally:
        m.finish("completed")
    assert m.steps == 25 and seen == [21]  # the next step only, counted through the rule
    assert m.probes.hot.steady is False  # stopped: the short path is off until the next run


def test_a_backward_reaches_torch_with_its_gradient_and_leaves_no_flag_set(tmp_path):
    w = torch.ones(2, requires_grad=True)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        (w * 2).sum().backward()
        assert not m.probes.hot.in_backward and torch.equal(w.grad, torch.full((2,), 2.0))
    finally:
        m.finish("completed")


def test_the_fast_call_honours_module_compile_made_during_the_run(tmp_path):
    """The fast path calls Module._call_impl itself while nothing is compiled; module.compile() goes through
    torch.compile (watched), so the next calls run the compiled _call_impl, each counted."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.lin(x)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for step in range(25):
            if step == 20:  # steady: the call takes the fast path, calling torch's _call_impl itself
                assert m.probes.hot.call_impl is torch.nn.Module._call_impl
                model.compile(backend=backend)
                assert m.probes.hot.call_impl is None
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
    finally:
        m.finish("completed")
    assert graphs and m.steps == 25 and m.tokens == 25 * 2


def test_the_fast_call_honours_a_compiled_call_impl_the_module_had_when_chosen(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 1))
    calls = []
    model._compiled_call_impl = lambda *args, **kwargs: (calls.append(1), model._call_impl(*args, **kwargs))[1]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    try:
        for _ in range(25):
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
        assert m.probes.hot.call_impl is None
    finally:
        m.finish("completed")
    assert len(calls) == 25 and m.steps == 25 and m.tokens == 25 * 2


def _loss_run(tmp_path, name, general: bool, reports_at=()):
    """30 steps of a tiny loop on a FakeClock (each step 1 s; a report after the steps in ``reports_at``), either as
    torch runs them (steady steps inline in the step hook) or with hot.steady cleared before each step (every
    step through Monitor.on_step_read): train_loss's points as each report and the final one find them, its
    statistics, and the steps and tokens."""
    from trainmeter.core.clock import FakeClock

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = FakeClock()
    m = make_monitor(make_options(run_dir=tmp_path / name, interval_s=3600, widget=False), text=False,
                     extensions=[], clock=clock).start()
    x = torch.randn(4, 3)
    seen = []
    try:
        for step in range(1, 31):
            if general:
                m.probes.hot.steady = False
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            clock.advance(1.0)
            opt.step()
            if step in reports_at:
                seen.append(m.series["train_loss"].read(0))  # what the report will read (it trims after)
                m.steps_state.next_report_s = 0.0
                m.maybe_report()
        final = m.series["train_loss"]
    finally:
        m.finish("completed")
    return seen, final.stats(), m.steps, m.tokens


def test_the_inline_steady_step_records_what_monitor_on_step_read_records(tmp_path):
    inline = _loss_run(tmp_path, "inline", general=False, reports_at=(10, 21, 30))
    general = _loss_run(tmp_path, "general", general=True, reports_at=(10, 21, 30))
    assert inline == general
    seen, stats, steps, tokens = inline
    assert steps == 30 and tokens == 120 and stats.count == 30 and stats.last_step == 30
    # before a report, the points of the steps before its own (a step's loss point is in train_loss once the next
    # step came); the report trims what it wrote
    assert [(end, steps, times) for end, steps, times, _ in seen] == [
        (9, list(range(1, 10)), [float(s) for s in range(1, 10)]),
        (20, list(range(10, 21)), [float(s) for s in range(10, 21)]),
        (29, list(range(21, 30)), [float(s) for s in range(21, 30)])]


def test_a_loss_queued_between_steady_steps_keeps_the_step_order_of_both_series(tmp_path):
    from trainmeter.core.scalars import StepLoss

    model, opt, m = _linear_run(tmp_path)
    try:
        for step in range(1, 26):
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
            if step == 20:
                m.steps_state.add_loss(StepLoss.read("train_loss.other", 1.5))  # a loss waiting for its series
        other = m.series["train_loss.other"].read(0)
        loss = m.series["train_loss"].read(0)
    finally:
        m.finish("completed")
    assert other[1:] == ([20], [other[2][0]], [1.5])
    assert loss[1] == list(range(1, 25))  # every step's loss but the last (held: the open point), in order


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_fast_backward_records_each_steps_loss_as_item_gives_it(tmp_path, dtype):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 3, dtype=dtype)
    m = make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), text=False,
                     extensions=[]).start()
    expected = []
    try:
        for _ in range(30):
            loss = model(x).pow(2).mean()
            expected.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert m.probes.steady_steps >= 20  # the steady steps took the fast paths
        values = m.series["train_loss"].read(0)[3] + [m.steps_state.held_value]  # the last one is the open point's
    finally:
        m.finish("completed")
    assert values == expected and all(type(v) is float for v in values)
