"""FSDP2 (``fully_shard``) on one gloo process: the counted FLOPs pass runs on a meta copy, the run trains on, and
the DTensor gradient norm the loop's clipping returns is recorded."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available in this build", allow_module_level=True)
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 fully_shard", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import trainmeter as tm  # noqa: E402
from tests.field.conftest import logged, passport, printed_by_us  # noqa: E402

STEPS, BATCH, SEQ, VOCAB, WIDTH = 12, 2, 8, 50, 16


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx)
        for block in self.blocks:
            h = torch.relu(block(h)) + 0.0
        return self.head(h) + 0.0


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(pause_at: int | None = None) -> list[float]:
    torch.manual_seed(0)
    model = TinyLM()
    for block in model.blocks:
        fsdp.fully_shard(block)
    fsdp.fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for step in range(STEPS):
        x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # FSDP2: returns a replicated DTensor
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
        if step == pause_at:
            time.sleep(0.15)  # past interval_s: the next step reports, and the compute wing counts mid-run
    return losses


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_fsdp2_trains_the_same_steps_and_losses_bare_and_monitored(gloo, tmp_path, printed):
    with printed() as bare:
        truth = _train(pause_at=2)
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=0.1) as m:
        losses = _train(pause_at=2)
    assert losses == truth and len(losses) == STEPS
    assert m.steps == STEPS and m.tokens == STEPS * BATCH * SEQ
    norms = logged(m, "grad_norm")
    assert [step for step, _ in norms] == list(range(1, STEPS + 1)) and all(v > 0 for _, v in norms)
    counted = passport(m)["compute"]
    linear_weights = 2 * WIDTH * WIDTH + WIDTH * VOCAB
    assert counted["counted_flops_per_token"] == 6 * linear_weights, counted["counted_missing"]
    derivation = {d["name"]: d for d in passport(m)["derivations"]}["flops_per_token.counted"]
    assert "meta copy" in derivation["inputs"][0]["source"]
    assert [line for line in printed_by_us(bare, ours) if not line.startswith("[step ")] == []  # its report lines


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_counted_pass_leaves_a_sharded_module_as_it_was(gloo):
    from trainmeter.compute.flop_count import counted_flops_per_token

    torch.manual_seed(0)
    model = TinyLM()
    for block in model.blocks:
        fsdp.fully_shard(block)
    fsdp.fully_shard(model)
    x = torch.randint(0, VOCAB, (BATCH, SEQ))

    def snapshot():
        hooks = [(type(m), len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]
        return hooks, [id(p) for p in model.parameters()], {k: v.to_local().clone() for k, v in
                                                           model.state_dict().items()}

    before = snapshot()
    counted = counted_flops_per_token(model, (x,))
    after = snapshot()
    assert counted.method == "meta" and counted.copy == "meta copy"
    assert before[:2] == after[:2] and all(torch.equal(before[2][k], after[2][k]) for k in before[2])
    model(x).sum().backward()  # the user's next step runs (it raised "mixed torch.Tensor and DTensor")


RANK_SCRIPT = '''
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
sys.path.insert(0, os.environ["TM_TEST_ROOT"])
import trainmeter as tm
from tests.field.test_fsdp2_loop import TinyLM, STEPS, BATCH, SEQ, VOCAB

def train():
    torch.manual_seed(0)
    model = TinyLM()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses

dist.init_process_group("gloo")
bare = train()
with tm.monitor(run_dir=os.environ["TM_RUNS"], interval_s=0.1) as m:
    ours = train()
out = {"bare": bare, "ours": ours, "steps": m.steps, "tokens": m.tokens,
       "counted": json.load(open(os.path.join(m.run_dir, "passport.json")))["compute"]["counted_flops_per_token"]}
with open(os.path.join(os.environ["TM_OUT"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_two_gloo_ranks_under_torchrun_train_the_same_losses_bare_and_monitored(tmp_path):
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not installed beside this Python")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    root = Path(__file__).parents[2]
    env = {**os.environ, "TM_TEST_ROOT": str(root), "TM_RUNS": str(tmp_path / "runs"), "TM_OUT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", str(script)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert out["ours"] == out["bare"] and len(out["ours"]) == STEPS
        assert out["steps"] == STEPS and out["tokens"] == STEPS * BATCH * SEQ
        assert out["counted"] == 6 * (2 * WIDTH * WIDTH + WIDTH * VOCAB)
