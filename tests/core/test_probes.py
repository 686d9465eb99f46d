"""Torch probes: steps, tokens, root discovery, loss capture, and complete removal."""

import gc
import threading
import tracemalloc

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.modules import module as nn_module  # noqa: E402
from torch.optim import optimizer as optim_module  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.conftest import tiny_model_and_data, train_steps  # noqa: E402
from trainmeter.core.faults import MonitorWarning  # noqa: E402


def _hook_counts():
    return (len(optim_module._global_optimizer_post_hooks), len(nn_module._global_forward_pre_hooks),
            len(nn_module._global_forward_hooks), torch.Tensor.backward)


def test_steps_tokens_params_and_loss_are_seen_without_code_change(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        losses = train_steps(model, opt, batches)
    assert m.steps == 20
    assert m.tokens == 20 * 4 * 6  # integer ids: batch x sequence
    assert m.token_unit == "tokens"
    assert m.params["trained"] == sum(p.numel() for p in model.parameters())
    captured = m.series["train_loss"]
    assert captured.stats().count == 20
    assert captured.stats().last == pytest.approx(losses[-1])


def test_seeded_model_gives_identical_losses_with_and_without_monitor(run_root):
    bare = train_steps(*tiny_model_and_data(seed=3))
    with tm.monitor(run_dir=run_root, interval_s=0.1):
        monitored = train_steps(*tiny_model_and_data(seed=3))
    assert monitored == bare  # bit-identical


def test_float_inputs_count_samples(run_root):
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert m.tokens == 24 and m.token_unit == "samples"


def test_root_is_the_module_holding_the_optimizers_parameters(run_root):
    """A frozen helper module called first in training mode is not taken for the model."""
    helper = nn.Embedding(32, 8)  # not trained, called first
    for p in helper.parameters():
        p.requires_grad_(False)
    model = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(3):
            x = torch.randint(0, 32, (2, 6))
            loss = F.cross_entropy(model(helper(x)), torch.randint(0, 32, (2,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert m.probes is None or m.probes.discovery.root_name == "Sequential"
    assert m.token_unit == "samples" and m.tokens == 6


def test_gradient_accumulation_sums_micro_batches_into_one_step(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for i in range(0, 8, 2):
            opt.zero_grad()
            for x, y in batches[i:i + 2]:
                F.cross_entropy(model(x), y).backward()
            opt.step()
    assert m.steps == 4 and m.tokens == 8 * 24
    assert m.series["train_loss"].stats().count == 4


def test_second_optimizer_does_not_double_count_steps(run_root):
    model, opt, batches = tiny_model_and_data()
    other = nn.Linear(2, 2)
    opt2 = torch.optim.SGD(other.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for x, y in batches[:5]:
            loss = F.cross_entropy(model(x), y) + other(torch.ones(1, 2)).sum()
            opt.zero_grad()
            opt2.zero_grad()
            loss.backward()
            opt.step()
            opt2.step()
    assert m.steps == 5


def test_user_emitted_train_loss_replaces_the_captured_one(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for x, y in batches[:5]:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tm.emit(train_loss=loss.detach() * 0 + 7.0)
    stats = m.series["train_loss"].stats()
    assert stats.last == 7.0


def test_everything_is_removed_after_the_run_even_on_error(run_root):
    before = _hook_counts()
    model, opt, batches = tiny_model_and_data()
    with pytest.raises(ZeroDivisionError):
        with tm.monitor(run_dir=run_root, interval_s=3600):
            train_steps(model, opt, batches[:2])
            raise ZeroDivisionError("boom")
    assert _hook_counts() == before
    assert not model._forward_pre_hooks and not model._forward_hooks and "forward" not in model.__dict__
    assert "__call__" not in vars(type(model))


@pytest.mark.slow
def test_a_hundred_monitored_runs_leave_no_hook_thread_or_growing_memory(run_root):
    model, opt, batches = tiny_model_and_data()
    before = _hook_counts()
    threads = threading.active_count()

    def one():
        with tm.monitor(run_dir=run_root, interval_s=3600):
            train_steps(model, opt, batches[:2])

    for _ in range(10):
        one()
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    for _ in range(100):
        one()
    gc.collect()
    grown, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert _hook_counts() == before
    assert threading.active_count() == threads
    assert not model._forward_pre_hooks and "forward" not in model.__dict__
    assert grown - base < 256 * 1024  # bytes retained across 100 runs


def test_not_one_step_or_emitted_point_is_lost_at_thousands_of_steps_per_second(run_root):
    from trainmeter.api import run_monitored
    from trainmeter.core.clock import FakeClock
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.options import make_options
    from trainmeter.record.runlog import read_events

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(64, 8), nn.Flatten(), nn.Linear(8 * 4, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)  # small: no denormal slowdown on one batch
    x, y = torch.randint(0, 64, (4, 4)), torch.randint(0, 64, (4,))
    n = 4000
    clock = FakeClock(100.0)  # 4,000 steps/s on the injected clock, whatever the machine's load
    options = make_options(run_dir=run_root, interval_s=0.1)
    m = make_monitor(options, clock=clock, extensions=default_extensions(options))
    with run_monitored(m):
        for _ in range(n):
            clock.advance(1 / 4000)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tm.emit(step_loss=loss.detach())
    # a report every 400 steps; the peer dropped ~3% at 2k/s
    assert m.steps == n and m.tokens == n * 16 and m.series["step_loss"].stats().count == n
    events = read_events(m.run_dir / "events.jsonl")
    assert m.reports > 5
    logged_steps = sum(len(e["step"]) for e in events if e["kind"] == "steps")
    logged_emits = sum(len(e["step"]) for e in events if e["kind"] == "series" and e["name"] == "step_loss")
    assert logged_steps == n and logged_emits == n
    assert sum(sum(e["value"]) for e in events if e["kind"] == "steps") == n * 16


def test_the_model_is_never_patched_itself_so_its_forward_and_signature_are_untouched(run_root):
    import inspect

    model, opt, batches = tiny_model_and_data()
    own = model.forward  # an instance-level forward set by the user (as Accelerate does)
    model.forward = own
    sig = inspect.signature(model.forward)
    keys = set(model.__dict__)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:3])
        assert inspect.signature(model.forward) == sig
        assert model.forward is own and set(model.__dict__) == keys
    assert model.__dict__["forward"] is own
    assert m.tokens == 3 * 24


def _torch_global_state():
    """Every dict/list in torch's module and optimizer globals (hook registries), by name and length."""
    import torch.autograd

    state = {}
    for mod in (nn_module, optim_module):
        for name, value in vars(mod).items():
            if isinstance(value, (dict, list)) and not name.startswith("__"):
                state[f"{mod.__name__}.{name}"] = len(value)
    state["backward"] = torch.autograd.backward
    state["Tensor.backward"] = torch.Tensor.backward
    state["Optimizer.__init__"] = optim_module.Optimizer.__init__
    state["Module.__call__"] = nn.Module.__call__
    state["GradScaler.scale"] = torch.amp.GradScaler.scale
    return state


def test_no_global_hook_is_used_and_nothing_is_left_in_torchs_global_state(run_root):
    before = _torch_global_state()
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:3])
        during = _torch_global_state()
        assert len(nn_module._global_forward_hooks_with_kwargs) == len(nn_module._global_forward_pre_hooks) == 0
        assert during["torch.nn.modules.module._global_forward_hooks"] == 0
    assert _torch_global_state() == before
    assert type(model).__call__ is nn.Module.__call__ and "__call__" not in vars(type(model))
    assert m.tokens == 3 * 24


def test_a_deepcopy_made_during_the_run_computes_with_its_own_weights_and_pickles(run_root, tmp_path):
    import copy
    import pickle

    model, opt, batches = tiny_model_and_data()
    x = batches[0][0]
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:2])
        twin = copy.deepcopy(model)
        with torch.no_grad():
            for p in twin.parameters():
                p.zero_()
        with torch.no_grad():
            assert torch.count_nonzero(twin(x)) == 0  # its own (zero) weights, not the original's
            assert torch.count_nonzero(model(x)) > 0
        torch.save(model, tmp_path / "m.pt")
        pickle.dumps(model)
        train_steps(model, opt, batches[2:4])
    assert m.tokens == 4 * 24
    clone = pickle.loads(pickle.dumps(model))
    assert torch.equal(clone(x), model(x))


def test_a_model_built_inside_the_run_is_found_and_its_first_step_counted(run_root):
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        model, opt, batches = tiny_model_and_data()
        train_steps(model, opt, batches[:3])
    assert m.steps == 3 and m.tokens == 3 * 24


def test_a_sweep_rebuilding_model_and_optimizer_counts_every_models_tokens(run_root):
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        kept = []
        for seed in range(3):
            model, opt, batches = tiny_model_and_data(seed=seed)
            kept.append(opt)  # the old optimizers stay alive
            train_steps(model, opt, batches[:2])
    assert m.steps == 6 and m.tokens == 6 * 24
    assert "probe-root" not in " ".join(m.warnings)


def test_a_model_trained_in_eval_mode_still_counts_also_when_declared(run_root):
    for declared in (False, True):
        model, opt, batches = tiny_model_and_data()
        model.eval()
        with tm.monitor(run_dir=run_root, interval_s=3600, model=model if declared else None) as m:
            train_steps(model, opt, batches[:3])
        assert m.tokens == 3 * 24, declared


def test_no_grad_calls_of_the_model_are_not_counted(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for x, y in batches[:3]:
            with torch.no_grad():
                model(x)  # evaluation
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert m.tokens == 3 * 24


def _accumulate(model, opt, batches, k, divide, backward=None):
    per_step = []
    for i in range(0, len(batches), k):
        opt.zero_grad()
        total = 0.0
        for x, y in batches[i:i + k]:
            loss = F.cross_entropy(model(x), y)
            total += loss.item()
            part = loss / k if divide else loss
            (backward or (lambda t: t.backward()))(part)
        opt.step()
        per_step.append(total / k)
    return per_step


def test_accumulation_that_divides_records_the_per_step_mean_loss(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        truth = _accumulate(model, opt, batches[:8], 4, divide=True)
    values = m.series["train_loss"].read(0)[3]
    assert values == pytest.approx(truth, rel=1e-6)
    info = m.series_info["train_loss"]
    assert not info["ambiguous"] and "divided" in info["note"]


def test_accumulation_without_division_is_recorded_as_the_sum_and_marked_ambiguous(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        truth = _accumulate(model, opt, batches[:8], 2, divide=False)
    values = m.series["train_loss"].read(0)[3]
    assert values == pytest.approx([2 * t for t in truth], rel=1e-6)
    assert m.series_info["train_loss"]["ambiguous"] is True
    assert "ambiguous" in m.series_info["train_loss"]["note"]


def test_torch_autograd_backward_is_captured_too(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        truth = _accumulate(model, opt, batches[:4], 1, divide=False, backward=torch.autograd.backward)
    assert m.series["train_loss"].read(0)[3] == pytest.approx(truth, rel=1e-6)


def test_a_gradscaler_scaled_loss_is_recorded_unscaled(run_root):
    model, opt, batches = tiny_model_and_data()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    truth = []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        for i in range(0, 8, 2):
            opt.zero_grad()
            total = 0.0
            for x, y in batches[i:i + 2]:
                loss = F.cross_entropy(model(x), y)
                total += loss.item()
                scaler.scale(loss / 2).backward()
            scaler.step(opt)
            scaler.update()
            truth.append(total / 2)
    values = m.series["train_loss"].read(0)[3]
    assert len(values) == m.steps and m.steps >= 1
    assert values == pytest.approx(truth[-len(values):], rel=1e-5)
    assert "GradScaler" in m.series_info["train_loss"]["note"]


def test_a_late_tm_emit_of_train_loss_gets_its_own_series_and_never_mixes(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        for i, (x, y) in enumerate(batches[:6]):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i >= 3:
                tm.emit(train_loss=123.0)
    assert m.series["train_loss"].stats().count == 6
    assert m.series["train_loss"].stats().max < 100
    assert m.series["train_loss.emitted"].read(0)[3] == [123.0] * 3


def test_a_gans_two_optimizers_keep_two_loss_series_and_the_sample_count_is_explained(run_root):
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 6), nn.Sequential(nn.Linear(6, 1))
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
    bce = nn.BCEWithLogitsLoss()
    d_losses, g_losses = [], []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        for _ in range(4):
            real = torch.randn(8, 6)
            fake = gen(torch.randn(8, 4))
            opt_d.zero_grad()
            d_real = bce(disc(real), torch.ones(8, 1))
            d_fake = bce(disc(fake.detach()), torch.zeros(8, 1))
            d_real.backward()
            d_fake.backward()
            opt_d.step()
            d_losses.append(d_real.item() + d_fake.item())
            opt_g.zero_grad()
            g_loss = bce(disc(fake), torch.ones(8, 1))
            g_loss.backward()
            opt_g.step()
            g_losses.append(g_loss.item())
    assert m.steps == 4 and m.probes is None or m.probes.discovery.root_name == "Sequential"
    assert m.series["train_loss"].read(0)[3] == pytest.approx(d_losses, rel=1e-6)
    assert m.series["train_loss.optimizer2"].read(0)[3] == pytest.approx(g_losses, rel=1e-6)
    assert m.tokens == 4 * 16 and m.token_unit == "samples"  # real + generated samples, as said:
    assert "2 times per step" in m.series_info["tokens_per_step"]["note"]


@pytest.mark.parametrize("when", ["before", "inside"])
def test_a_compiled_model_counts_at_the_compiled_wrapper_with_no_extra_graph(run_root, when):
    """Compiled in an earlier cell, or inside the monitored cell after its optimizer was built."""
    from torch._dynamo.utils import counters

    def train(model, opt, batches):
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    def graphs():
        return {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles")}

    def run():
        raw, opt, batches = tiny_model_and_data()  # nn.Sequential: Dynamo guards on its class dict
        if when == "before":
            model = torch.compile(raw, backend="eager")
        with tm.monitor(run_dir=run_root, interval_s=3600) as m:
            if when == "inside":
                model = torch.compile(raw, backend="eager")
            train(model, opt, batches[:4])
        return model, batches, m

    results = []
    for monitored in (False, True):
        torch._dynamo.reset()
        counters.clear()
        if monitored:
            model, batches, m = run()
            assert m.steps == 4 and m.tokens == 4 * 24
        else:
            raw, opt, batches = tiny_model_and_data()
            model = torch.compile(raw, backend="eager")
            train(model, opt, batches[:4])
        train(model, model._orig_mod and torch.optim.SGD(model.parameters(), lr=0.1), batches[4:6])  # after the run
        results.append(graphs())
    assert results[0] == results[1] and results[0]["stats"]["unique_graphs"] >= 1


def test_a_model_left_in_the_notebook_does_not_make_a_model_compiled_in_the_cell_recompile(ip, run_root):
    """A leftover nn.Sequential with its optimizer in the user namespace: its class must stay unpatched."""
    from torch._dynamo.utils import counters

    ip.run_cell("from tests.conftest import tiny_model_and_data\n"
                "left_model, left_opt, _ = tiny_model_and_data()")
    torch._dynamo.reset()
    counters.clear()
    raw, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        model = torch.compile(raw, backend="eager")  # nn.Sequential: traced through its class dict
        train_steps(model, opt, batches[:3])
    assert m.steps == 3 and m.tokens == 3 * 24
    train_steps(model, opt, batches[3:5])
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]
    assert "__call__" not in vars(nn.Sequential)


def test_a_ddp_wrapped_model_is_found_and_counted(run_root, tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        raw, _, batches = tiny_model_and_data()
        model = DistributedDataParallel(raw)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with tm.monitor(run_dir=run_root, interval_s=3600) as m:
            train_steps(model, opt, batches[:3])
    finally:
        dist.destroy_process_group()
    assert m.steps == 3 and m.tokens == 3 * 24
    assert m.probes.discovery.root_name == "DistributedDataParallel"


def test_objects_that_refuse_to_be_looked_at_do_not_stop_discovery(run_root):
    class Hostile:
        @property
        def __class__(self):
            raise RuntimeError("no")

        def __getattribute__(self, name):
            raise RuntimeError("no")

    hostile = Hostile()  # noqa: F841 (a local the frame scan meets)
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:2])
    assert m.tokens == 2 * 24 and m.warnings == []


def test_a_model_and_optimizer_from_an_earlier_notebook_cell_count_from_the_first_step(ip, run_root):
    import json

    ip.run_cell("from tests.conftest import tiny_model_and_data, train_steps\n"
                "nb_model, nb_opt, nb_batches = tiny_model_and_data()")
    ip.run_cell_magic("trainmeter", f"--dir {run_root}", "train_steps(nb_model, nb_opt, nb_batches[:3])")
    (passport_path,) = run_root.glob("*/passport.json")
    p = json.loads(passport_path.read_text())
    assert p["steps"] == 3 and p["tokens"] == 3 * 24
    assert "step 2" not in p["series_info"]["tokens_per_step"]["note"]


def test_a_step_mixing_the_cpu_fast_path_and_the_general_path_keeps_every_part(run_root):
    """A 0-d CPU loss read at once, then a backward the fast path does not take (a list): one summed loss."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    truth = []
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        for _ in range(3):
            opt.zero_grad()
            first = model(x).pow(2).mean() / 2
            second = model(x).abs().mean() / 2
            first.backward()
            torch.autograd.backward([second])
            truth.append(first.item() + second.item())
            opt.step()
    assert m.series["train_loss"].read(0)[3] == pytest.approx(truth, rel=1e-6)
    info = m.series_info["train_loss"]
    assert not info["ambiguous"] and "divided" in info["note"]  # both parts were divided


def test_accumulation_that_starts_after_single_part_steps_reads_the_held_first_parts_division(run_root):
    """Single-part steps read no grad_fn (spec section 17); the first multi-part step reads the held first part."""
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        m.add_reader()  # keeps every point in memory for the asserts
        single = _accumulate(model, opt, batches[:10], 1, divide=False)  # steady: the fast paths
        divided = _accumulate(model, opt, batches[10:], 2, divide=True)  # then accumulation, each part / 2
    assert m.series["train_loss"].read(0)[3] == pytest.approx(single + divided, rel=1e-6)
    info = m.series_info["train_loss"]
    assert not info["ambiguous"] and "divided" in info["note"]


def test_accumulation_whose_first_part_alone_is_undivided_is_marked_ambiguous(run_root):
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:10])  # steady single-part steps first
        opt.zero_grad()
        (x1, y1), (x2, y2) = batches[10:12]
        F.cross_entropy(model(x1), y1).backward()  # not divided
        (F.cross_entropy(model(x2), y2) / 2).backward()  # divided
        opt.step()
    assert m.series_info["train_loss"]["ambiguous"] is True


def test_the_loss_tensor_is_let_go_at_the_optimizer_step(run_root):
    """The fast path holds the step's first loss tensor from its backward to the step, never longer."""
    import weakref

    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:10])  # steady state
        x, y = batches[10]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        held = weakref.ref(loss)
        opt.step()
        del loss
        gc.collect()
        assert held() is None
    assert m.steps == 11


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_arguments_reach_torch_unchanged(run_root):
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.b = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return (self.w * self.w * self.b * x).sum()

    model = Pair()
    w, b = model.w, model.b
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(3)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        for _ in range(25):  # into steady state
            opt.zero_grad()
            model(x).backward()
            opt.step()
        opt.zero_grad()
        loss = model(x)
        loss.backward(retain_graph=True, create_graph=True)
        assert w.grad.grad_fn is not None  # create_graph reached torch
        w.grad = b.grad = None
        loss.backward(retain_graph=True, inputs=[b])  # the graph was retained; only b gets a gradient
        assert w.grad is None and b.grad is not None
        torch.autograd.backward(loss, None, None, False, None, [w])  # all six, positionally
        assert w.grad is not None
        opt.step()
    assert m.steps == 26
    assert m.tokens == 26 * 3  # one float batch of 3 samples per step


def test_a_backward_with_parameters_other_than_torchs_is_wrapped_on_the_general_path(run_root):
    from trainmeter.core.wrappers import _plain_backward

    def newer(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None, *, extra=1):
        return ("called", tensors, grad_tensors, retain_graph, create_graph, inputs, extra)

    assert _plain_backward(torch.autograd.backward.__wrapped__ if hasattr(torch.autograd.backward, "__wrapped__")
                           else torch.autograd.backward)
    assert not _plain_backward(newer)
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        probes = m.probes
        wrapper = probes.wrappers.backward(newer)
        loss = torch.tensor(2.5, requires_grad=True) * 2
        assert wrapper(loss, None, True, inputs=[1], extra=3) == ("called", loss, None, True, False, [1], 3)
        assert probes.loss.step_loss is not None and probes.loss.step_loss.parts  # captured on the general path
        probes.loss.take()


def test_a_root_called_twice_per_step_counts_both_batches_in_steady_state(run_root):
    """A step with two root calls takes the general step path (the fast one expects one): both count."""
    model, opt, batches = tiny_model_and_data()
    with tm.monitor(run_dir=run_root, interval_s=3600) as m:
        train_steps(model, opt, batches[:10])  # steady, one call per step
        for (x1, y1), (x2, y2) in zip(batches[10::2], batches[11::2], strict=True):
            loss = F.cross_entropy(model(x1), y1) + F.cross_entropy(model(x2), y2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert m.steps == 15
    assert m.tokens == 10 * 24 + 5 * 2 * 24
    assert "up to 2 times per step" in m.series_info["tokens_per_step"]["note"]


def test_a_compiled_function_calling_the_watched_model_traces_a_pass_through_with_no_extra_graph(run_root):
    """Dynamo inlines the root's class wrapper into a compiled train step: it must see torch's call only."""
    from torch._dynamo.utils import counters

    class Net(nn.Module):  # the user's own class: its __call__ is the one wrapped while watched
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x)

    def run(monitored):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)

        @torch.compile(backend="eager")
        def loss_of(model, x):
            return model(x).pow(2).mean()

        losses = []

        def train():
            for _ in range(30):
                loss = loss_of(model, x)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())

        if monitored:
            with pytest.warns(MonitorWarning, match="never seen called"), \
                    tm.monitor(run_dir=run_root, interval_s=3600, model=model) as m:
                train()
            assert m.steps == 30  # steps count; the batches, seen only by Dynamo, are not, and the warning says why
            assert len(m.warnings) == 1 and "model passed as model= (Net) was never seen called" in m.warnings[0]
            assert "torch.compile'd function" in m.warnings[0]
        else:
            train()
        return losses, {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles")}

    bare, ours = run(False), run(True)
    assert ours[0] == bare[0]  # the same numbers
    assert ours[1] == bare[1] and bare[1]["stats"]["unique_graphs"] >= 1  # no extra graph, no recompile
