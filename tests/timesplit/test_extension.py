"""Where the time goes: data waits, eval spans and checkpoints with a fake clock driven by the loop."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

import trainmeter as tm
from trainmeter.core.clock import FakeClock
from trainmeter.core.patches import FINDER
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.record.runlog import read_events
from trainmeter.timesplit.extension import DATA_WAIT_SERIES, GOODPUT_SERIES, TimeSplit

COMPUTE_S = 0.28  # fake seconds per forward
WAIT_PER_ITEM_S = 0.03  # fake seconds per dataset item; batch of 4 -> 0.12 s per batch


class Clocked(nn.Module):
    """A tiny token model whose forward advances the fake clock by ``cost_s``."""

    def __init__(self, clock: FakeClock, cost_s: float) -> None:
        super().__init__()
        self.clock = clock
        self.cost_s = cost_s
        self.emb = nn.Embedding(32, 8)
        self.head = nn.Linear(8 * 6, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.cost_s)
        return self.head(self.emb(x).flatten(1))


class SlowTokens(Dataset):
    """Token rows whose ``__getitem__`` advances the fake clock (an injected data wait)."""

    def __init__(self, clock: FakeClock | None, wait_s: float, n: int = 96) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 32, (n, 6), generator=g)
        self.y = torch.randint(0, 32, (n,), generator=g)
        self.clock = clock
        self.wait_s = wait_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.clock is not None:
            self.clock.advance(self.wait_s)
        return self.x[i], self.y[i]


class Delay:
    """Pickled by ``torch.save``: advances the clock while the checkpoint is written."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds

    def __reduce__(self):
        self.clock.advance(self.seconds)
        return (int, (0,))


def _monitor(run_root, clock, *extensions, interval_s=3600):
    return make_monitor(make_options(run_dir=run_root, interval_s=interval_s), clock=clock, text=False,
                   extensions=list(extensions))


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def _step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_data_wait_share_matches_injected_loader_delay(tmp_path):
    clock = FakeClock(100.0)
    torch.manual_seed(0)
    model = Clocked(clock, COMPUTE_S)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    for x, y in DataLoader(SlowTokens(clock, WAIT_PER_ITEM_S), batch_size=4):
        _step(model, opt, x, y)
    m.finish("completed")
    p = _passport(m)
    injected = 4 * WAIT_PER_ITEM_S / (4 * WAIT_PER_ITEM_S + COMPUTE_S)  # 0.3
    assert abs(p["time"]["data_wait_share"] - injected) <= 0.05
    assert p["time"]["batches"] == 24
    assert p["time"]["mean_wait_s"] == pytest.approx(4 * WAIT_PER_ITEM_S)
    assert p["phases_s"]["data_wait"] == pytest.approx(24 * 4 * WAIT_PER_ITEM_S)
    assert p["phases_s"]["train"] == pytest.approx(24 * COMPUTE_S)
    assert p["throughput"]["train_tokens_per_s"] == pytest.approx(24 / COMPUTE_S)
    assert p["time"]["derivations"][0]["formula"] == "data_wait_s / (train_s + data_wait_s)"


def test_starving_loader_warns_above_twenty_percent_and_not_below(tmp_path):
    for wait_s, expect in ((WAIT_PER_ITEM_S, True), (0.005, False)):
        clock = FakeClock(0.0)
        split = TimeSplit()
        m = _monitor(tmp_path / str(wait_s), clock, split).start()
        for _ in DataLoader(SlowTokens(clock, wait_s), batch_size=4):
            clock.advance(COMPUTE_S)
        warnings = split.warnings()
        m.finish("completed")
        assert bool(warnings) is expect
        if expect:
            assert warnings[0] == "data waits are 30% of step time: the loader is starving the GPU"


def test_yielded_batches_are_identical_with_and_without_the_probe(tmp_path):
    plain = [b for b in DataLoader(SlowTokens(None, 0.0), batch_size=5, shuffle=False)]
    m = _monitor(tmp_path, FakeClock(), TimeSplit()).start()
    timed = [b for b in DataLoader(SlowTokens(None, 0.0), batch_size=5, shuffle=False)]
    m.finish("completed")
    assert len(plain) == len(timed) == 20
    for (xa, ya), (xb, yb) in zip(plain, timed, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def _train_run(run_root, with_aux: bool):
    clock = FakeClock(100.0)
    torch.manual_seed(0)
    model = Clocked(clock, 0.25)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 32, (4, 6), generator=g), torch.randint(0, 32, (4,), generator=g)
    m = _monitor(run_root, clock, TimeSplit()).start()
    for step in range(12):
        _step(model, opt, x, y)
        if with_aux and step % 4 == 3:
            model.eval()
            with tm.phase("eval"), torch.no_grad():  # what says it is eval
                model(x)  # 0.25 s of eval forward
                clock.advance(1.0)  # the rest of the evaluation
            model.train()
            torch.save({"model": model.state_dict(), "delay": Delay(clock, 0.5)}, io.BytesIO())
    m.finish("completed")
    return _passport(m)


def test_eval_and_checkpoint_are_credited_and_training_throughput_is_unchanged(tmp_path):
    base = _train_run(tmp_path / "base", with_aux=False)
    aux = _train_run(tmp_path / "aux", with_aux=True)
    assert aux["phases_s"]["eval"] == pytest.approx(3 * 1.25) and aux["phases_s"].get("inference", 0) == 0
    assert aux["phases_s"]["checkpoint"] == pytest.approx(3 * 0.5)
    assert aux["time"]["eval_spans"] == 3 and aux["time"]["checkpoint_saves"] == 3
    assert aux["time"]["inference_spans"] == 3  # each replaced by tm.phase("eval")
    assert aux["phases_s"]["train"] == pytest.approx(base["phases_s"]["train"]) == pytest.approx(12 * 0.25)
    assert aux["throughput"]["train_tokens_per_s"] == pytest.approx(base["throughput"]["train_tokens_per_s"])
    assert aux["throughput"]["session_tokens_per_s"] < base["throughput"]["session_tokens_per_s"]
    assert aux["goodput"] == pytest.approx(3.0 / (3.0 + 3.75 + 1.5))


def test_a_model_switched_to_eval_mode_is_inference_until_the_next_training_work_and_nothing_is_warned(tmp_path):
    clock = FakeClock()
    model = Clocked(clock, 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    model.eval()  # before the first step: the model is a candidate (a sanity-check validation)
    clock.advance(1.0)
    model.train()
    _step(model, opt, x, y)
    model.eval()
    clock.advance(2.0)
    _step(model, opt, x, y)  # trains in eval mode: the span ends at the backward (after the 0.1 s forward)
    model.eval()
    clock.advance(3.0)
    model.training = True  # as Lightning restores the mode: no .train() call
    _step(model, opt, x, y)  # the training forward ends the span
    clock.advance(0.5)
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["inference"] == pytest.approx(1.0 + 2.0 + 0.1 + 3.0)
    assert p["phases_s"]["eval"] == 0 and split.eval_spans == 0  # nothing said it was an evaluation
    assert split.inference_spans == 3 and p["warnings"] == []
    (panel,) = split.panels()
    assert "inference (no grad)" in [r["label"] for r in panel["rows"]]


def test_a_checkpoint_saved_inside_an_eval_span_is_credited_to_checkpoint(tmp_path):
    clock = FakeClock()
    model = Clocked(clock, 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    for said in (True, False):  # an evaluation that says so, then a model merely in eval mode
        _step(model, opt, x, y)
        model.eval()
        with tm.phase("eval") if said else contextlib.nullcontext():
            clock.advance(1.0)
            torch.save({"delay": Delay(clock, 0.5)}, io.BytesIO())  # Lightning: ModelCheckpoint at validation end
            clock.advance(0.25)  # the rest of the evaluation, after the save
        model.train()
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["checkpoint"] == pytest.approx(2 * 0.5)
    assert p["phases_s"]["eval"] == pytest.approx(1.25) and p["phases_s"]["inference"] == pytest.approx(1.25)
    assert split.eval_spans == 1 and split.inference_spans == 2 and split.checkpoints.saves == 2


def test_a_model_switched_to_eval_mode_inside_a_span_of_its_own_is_that_span(tmp_path):
    clock = FakeClock()
    model = Clocked(clock, 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    _step(model, opt, x, y)
    with tm.phase("rollout"):  # an adapter's own phase (reinforcement-learning rollouts)
        model.eval()
        clock.advance(2.0)
    model.train()
    _step(model, opt, x, y)
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["rollout"] == pytest.approx(2.0) and p["phases_s"].get("inference", 0) == 0
    assert split.inference_spans == 0 and split.eval_spans == 0


class LossModule(nn.Module):
    """The watched module, the model inside it (sentence-transformers' losses)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x), y)


def test_a_watched_loss_module_follows_the_model_inside_it_not_a_small_part(tmp_path):
    clock = FakeClock()
    loss_module = LossModule(Clocked(clock, 0.1))
    opt = torch.optim.SGD(loss_module.parameters(), lr=0.1)
    x, y = torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    for _ in range(2):
        opt.zero_grad()
        loss_module(x, y).backward()
        opt.step()
    assert m.model_ref() is loss_module
    loss_module.model.emb.eval()  # a small part in eval mode (a frozen layer): no span
    clock.advance(0.5)
    loss_module.model.emb.train()
    loss_module.model.eval()  # the model inside: the loss module follows it
    clock.advance(1.0)
    loss_module.model.train()
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["inference"] == pytest.approx(1.0) and split.inference_spans == 1


def test_data_waits_inside_an_inference_span_go_to_it(tmp_path):
    clock = FakeClock()
    model = Clocked(clock, 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split).start()
    _step(model, opt, torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    model.eval()
    for x, _ in DataLoader(SlowTokens(clock, 0.01, n=8), batch_size=4):
        model(x)
    model.train()
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["data_wait"] == 0.0 and split.batches == 0
    assert p["phases_s"]["inference"] == pytest.approx(8 * 0.01 + 2 * 0.1)


@pytest.fixture
def fake_savers(tmp_path, monkeypatch):
    """A fake ``safetensors`` package on disk (imported during the run) and a fake transformers."""
    if "safetensors" in sys.modules or "transformers" in sys.modules:
        pytest.skip("real safetensors/transformers already imported")
    pkg = tmp_path / "fakepkgs" / "safetensors"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "torch.py").write_text(
        "ACTION = None\nERROR = None\nRESULT = object()\n"
        "def save_file(tensors, filename, metadata=None):\n"
        "    if ACTION: ACTION()\n    if ERROR: raise ERROR\n    return RESULT\n"
        "def save_model(model, filename):\n    return save_file({}, filename)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "fakepkgs"))
    tf = types.ModuleType("transformers")
    mu = types.ModuleType("transformers.modeling_utils")

    class PreTrainedModel:
        def save_pretrained(self, path):
            import safetensors.torch as st

            return st.save_file({}, path)

    mu.PreTrainedModel = PreTrainedModel
    monkeypatch.setitem(sys.modules, "transformers", tf)
    monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
    yield PreTrainedModel
    for name in ("safetensors", "safetensors.torch"):
        sys.modules.pop(name, None)


def test_savers_return_and_raise_as_without_trainmeter_and_count_as_checkpoints(tmp_path, fake_savers):
    clock = FakeClock()
    m = _monitor(tmp_path, clock, TimeSplit()).start()
    import safetensors.torch as st  # imported during the run: wrapped by the post-import hook

    st.ACTION = lambda: clock.advance(0.7)
    assert st.save_file({}, "a") is st.RESULT
    assert fake_savers().save_pretrained("b") is st.RESULT  # nested saves count once
    st.ERROR = OSError(28, "No space left on device")
    with pytest.raises(OSError) as caught:
        st.save_model(None, "c")
    assert caught.value is st.ERROR
    assert m.phases.training and m.spans.depth == 0  # the failed save closed its span
    with pytest.raises(RuntimeError):
        torch.save({}, str(tmp_path / "missing" / "dir" / "x.pt"))
    m.finish("completed")
    p = _passport(m)
    assert p["phases_s"]["checkpoint"] == pytest.approx(3 * 0.7)
    assert p["time"]["checkpoint_saves"] == 4
    assert "transformers.modeling_utils.PreTrainedModel.save_pretrained" in p["time"]["patched"]
    # one record per outermost save, the failed ones too: where, when, how long, through what
    assert [(r["path"], r["step"], r["source"]) for r in p["checkpoints"]] == [
        ("a", 0, "safetensors"), ("b", 0, "transformers save_pretrained"), ("c", 0, "safetensors"),
        (str(tmp_path / "missing" / "dir" / "x.pt"), 0, "torch.save")]
    assert [r["seconds"] for r in p["checkpoints"]] == pytest.approx([0.7, 0.7, 0.7, 0.0])
    assert all(r["bytes"] is None for r in p["checkpoints"])  # nothing on disk at those paths


def test_every_patch_and_hook_is_removed_at_stop(tmp_path, fake_savers):
    import torch.optim.optimizer as optim_mod

    before = (_BaseDataLoaderIter.__next__, nn.Module.train, torch.save, torch.serialization.save,
              fake_savers.save_pretrained, len(optim_mod._global_optimizer_post_hooks), list(sys.meta_path))
    m = _monitor(tmp_path, FakeClock(), TimeSplit()).start()
    import safetensors.torch as st

    during = (st.save_file, torch.save, nn.Module.train)
    m.finish("completed")
    after = (_BaseDataLoaderIter.__next__, nn.Module.train, torch.save, torch.serialization.save,
             fake_savers.save_pretrained, len(optim_mod._global_optimizer_post_hooks), list(sys.meta_path))
    assert after == before
    assert during[0] is not st.save_file and during[1] is not torch.save and during[2] is not nn.Module.train
    assert FINDER not in sys.meta_path
    assert "__next__" not in vars(torch.utils.data.dataloader._SingleProcessDataLoaderIter)


def test_panel_shares_and_per_report_series(tmp_path):
    clock = FakeClock()
    split = TimeSplit()
    m = _monitor(tmp_path, clock, split, interval_s=1.0).start()
    for _ in DataLoader(SlowTokens(clock, 0.05, n=40), batch_size=4):  # 0.2 s wait per batch
        clock.advance(0.3)
        m.on_step(4)
    (panel,) = split.panels()
    rows = {r["label"]: r for r in panel["rows"]}
    assert panel["title"] == "Where the time goes"
    assert rows["train"]["value"] == pytest.approx(0.6, abs=0.01)
    assert rows["data_wait"]["value"] == pytest.approx(0.4, abs=0.01)
    assert rows["data wait / step time"]["value"] == pytest.approx(0.4)
    assert rows["train"]["note"] == "3 s" and rows["data_wait"]["note"] == "2 s"  # sizes.format_seconds
    m.finish("completed")
    assert m.series[DATA_WAIT_SERIES].stats().last == pytest.approx(0.4)
    assert 0.0 < m.series[GOODPUT_SERIES].stats().last <= 1.0
    assert split.charts()[0]["series"] == [GOODPUT_SERIES, DATA_WAIT_SERIES]
    intervals = [e for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval"]
    shares = [e["time"]["data_wait_share"] for e in intervals if e["time"]["data_wait_share"] is not None]
    assert len(shares) >= 3 and shares == pytest.approx([0.4] * len(shares))


def _goodputs(run_root, threaded: bool) -> list:
    clock = FakeClock()
    m = _monitor(run_root, clock, TimeSplit(), interval_s=1.0).start()
    m.worker.threaded = threaded
    held = m.worker.hold_for_fork(5.0) if threaded else False  # the worker takes no job until released
    for i, _ in enumerate(DataLoader(SlowTokens(clock, 0.05, n=48), batch_size=4)):  # 0.2 s wait per batch
        clock.advance(0.3)
        m.on_step(4)
        if i == 6 and held:
            m.worker.release_after_fork()  # the reports queued so far are read now, steps after them
    m.finish("completed")
    intervals = [e for e in read_events(m.run_dir / "events.jsonl") if e["kind"] == "interval"]
    return [e["time"]["goodput"] for e in intervals]


def test_a_report_read_later_on_the_worker_measures_its_own_window_not_the_phases_since(tmp_path):
    later = _goodputs(tmp_path / "worker", threaded=True)
    assert later == _goodputs(tmp_path / "inline", threaded=False)
    assert len(later) >= 4 and later[:-1] == pytest.approx([0.6] * (len(later) - 1))  # train 0.3 s of each 0.5 s
