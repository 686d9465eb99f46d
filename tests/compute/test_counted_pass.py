"""The counted pass in two halves: the meta copy on the training thread, its pass on another, beside the training."""

from __future__ import annotations

import json
import sys
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.compute.test_flop_count import TinyGPT, batch  # noqa: E402
from tests.conftest import tiny_model_and_data, train_steps  # noqa: E402
from trainmeter.compute import counted_pass  # noqa: E402
from trainmeter.compute.counted_pass import CountOnWorker, prepare_counted  # noqa: E402
from trainmeter.compute.flop_count import counted_flops_per_token  # noqa: E402

_COMPILED_ANYTHING = counted_pass._compiled_anything


@pytest.fixture(autouse=True)
def _nothing_compiled(monkeypatch):
    """An earlier test in this process may have compiled something: these tests read a process that did not."""
    monkeypatch.setattr(counted_pass, "_compiled_anything", lambda: False)


def _on_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.update(result=fn()))
    thread.start()
    thread.join(60)
    return out["result"]


def test_a_prepared_pass_run_on_another_thread_gives_the_count_of_the_whole_meta_pass():
    model = TinyGPT()
    prepared = prepare_counted(model, (batch(),))
    assert prepared is not None and prepared.result is None
    got = _on_thread(prepared.run)
    assert got == counted_flops_per_token(model, (batch(),), method="meta")
    assert prepared.run() is got  # once: later calls return the first result


def test_the_pass_on_another_thread_draws_no_random_number_and_imports_nothing():
    model = TinyGPT()  # its dropout runs in training mode on the copy
    prepared = prepare_counted(model, (batch(),))
    rng, modules = torch.get_rng_state(), set(sys.modules)
    result = _on_thread(prepared.run)
    assert result.flops_per_unit is not None
    assert torch.equal(rng, torch.get_rng_state())  # the training's random stream is untouched (no fork needed)
    assert set(sys.modules) == modules


def test_the_counter_registers_no_global_module_hook_that_the_users_modules_would_run():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            from torch.nn.modules import module

            seen.append(len(module._global_forward_pre_hooks) + len(module._global_forward_hooks))
            return self.lin(x)

    assert counted_flops_per_token(Probe(), (torch.randn(2, 4),), method="meta").total_flops == 2 * (2 * 2 * 4 * 4)  # forward, weight grad
    assert seen == [0]


def test_the_counter_on_another_thread_counts_none_of_the_training_threads_operators():
    inside, trained = threading.Event(), threading.Event()

    class Waits(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            inside.set()
            trained.wait(30)  # the training thread multiplies meanwhile
            return self.lin(x)

    model = Waits()
    trained.set()
    alone = counted_flops_per_token(model, (torch.randn(2, 8),), method="meta").total_flops
    inside.clear()
    trained.clear()
    prepared = prepare_counted(model, (torch.randn(2, 8),))
    thread = threading.Thread(target=prepared.run)
    thread.start()
    assert inside.wait(30)
    a = torch.randn(64, 64, requires_grad=True)
    (a @ a).sum().backward()  # the training thread's own operators, while the counter is on over there
    trained.set()
    thread.join(30)
    assert prepared.result.total_flops == alone


def test_a_process_that_compiled_anything_or_a_training_step_counts_whole_on_the_training_thread(monkeypatch):
    monkeypatch.setattr(counted_pass, "_compiled_anything", _COMPILED_ANYTHING)
    model = TinyGPT()
    assert prepare_counted(model, (batch(),), call="training_step") is None
    compiled = SimpleNamespace(counters={"frames": {"total": 1}, "stats": {"calls_captured": 1}})
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", compiled)
    assert prepare_counted(model, (batch(),)) is None
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", SimpleNamespace())  # unreadable counters: whole
    assert prepare_counted(model, (batch(),)) is None


class NeedsData(nn.Module):  # reads a value: no meta pass, a real one
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if float(x.sum()) > -1e9:
            return self.lin(x)
        return x


def test_a_failed_meta_pass_of_a_cpu_model_is_followed_by_the_real_pass_as_auto_gives_it():
    model, x = NeedsData(), torch.randn(2, 4)
    failed = _on_thread(prepare_counted(model, (x,)).run)
    assert failed.flops_per_unit is None and failed.reason.startswith("meta pass failed")
    monitor = SimpleNamespace(model_ref=lambda: model, probes=SimpleNamespace(paused=False))
    after = CountOnWorker._real_pass(monitor, failed, ((x,), {}, {}, "forward"))
    assert after == counted_flops_per_token(model, (x,), method="auto")


def _counted(m):
    return json.loads((m.run_dir / "passport.json").read_text())["compute"]["counted_flops_per_token"]


def test_a_threaded_run_reads_the_workers_count_at_a_later_report_and_its_passport_holds_it(run_root, monkeypatch):
    ran = []
    real_run = counted_pass.PreparedCount.run

    go = threading.Event()  # the pass waits until the first report has returned: the race is the test's to decide

    def run(self):
        ran.append(threading.current_thread().name)
        go.wait(30.0)
        return real_run(self)

    monkeypatch.setattr(counted_pass.PreparedCount, "run", run)
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:3])
        m.steps_state.next_report_s = 0.0
        m.maybe_report()  # the first report: the pass is queued on the worker
        assert m.extension("compute").counted is None
        go.set()
        m.worker.drain()
        m.steps_state.next_report_s = 0.0
        m.maybe_report()  # a later one reads it (a steady report: the compute wing's fields come from its job)
        m.worker.drain()
        assert m.extension("compute").counted.value is not None
        train_steps(model, opt, batches[3:])
    assert ran[0] == "trainmeter-report-worker"
    model2, opt2, batches2 = tiny_model_and_data()
    inline = counted_flops_per_token(model2, (batches2[0][0],), method="auto")
    assert _counted(m) == pytest.approx(inline.flops_per_unit)


def test_a_run_that_ends_before_the_worker_ran_its_pass_waits_for_it_at_the_final_report(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:3])
        m.steps_state.next_report_s = 0.0
        m.maybe_report()
    assert _counted(m) is not None


def test_the_final_read_runs_a_pass_the_worker_has_not_begun_and_the_queued_job_then_returns_that_result():
    prepared = prepare_counted(TinyGPT(), (batch(),))
    blocker, jobs = threading.Event(), []
    from trainmeter.core.report_worker import ReportWorker

    worker = ReportWorker()
    worker.submit("other", lambda: blocker.wait(30))  # a wing's job the worker is busy with
    worker.submit("compute", lambda: jobs.append(prepared.run()))
    monitor = SimpleNamespace(worker=worker, model_ref=None, probes=None)
    ahead = counted_pass.CountOnWorker()
    ahead._prepared = prepared
    got = ahead.take(monitor, final=True)  # not a wait for the other job: the pass runs here
    assert got is not None and got.flops_per_unit is not None and not jobs
    blocker.set()
    assert worker.drain(30) and jobs == [got]
    worker.close()
