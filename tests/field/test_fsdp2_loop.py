"""FSDP2 (``fully_shard``) on one gloo process: the counted FLOPs pass runs on a meta copy, the run trains on, and
the DTensor gradient norm the loop's clipping returns is recorded; two gloo ranks under ``!torchrun`` from a
monitored cell train as bare and are counted from their first step."""

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
from tests.field.scripts.tiny_lm import TinyLM as _TinyLM  # noqa: E402

STEPS, BATCH, SEQ, VOCAB, WIDTH = 12, 2, 8, 50, 16


def TinyLM() -> nn.Module:  # noqa: N802 - the model class, at this file's sizes
    return _TinyLM(VOCAB, WIDTH)


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


CELL = """%%trainmeter --name fsdp2 --no-widget --dir {runs}
!TM_TAG=cell {torchrun} --standalone --nproc_per_node 2 {script} {args}
"""


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_fsdp2_gloo_ranks_under_torchrun_from_a_monitored_cell_train_as_bare_and_are_counted(tmp_path):
    """``!torchrun`` in a ``%%trainmeter`` cell of a real kernel: each rank (it never imports trainmeter) is
    recorded by the autostart from its first step, with its losses as a bare launch gives them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    jupyter_client = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    script = Path(__file__).parent / "scripts" / "fsdp2_plain.py"
    args = f"{STEPS} {BATCH} {SEQ} {VOCAB} {WIDTH}"
    torchrun = f"{sys.executable} -m torch.distributed.run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMETER_RUN")
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({"TM_OUT": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[2] / "src"), env.get("PYTHONPATH", "")])})
    for _ in range(2):  # a bare launch (nothing of ours in it) once more if gloo's rendezvous aborted under load
        bare = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                               "2", str(script), *args.split()], env={**env, "TM_TAG": "bare"}, capture_output=True,
                              text=True, timeout=240)
        if bare.returncode == 0:
            break
    assert bare.returncode == 0, bare.stderr[-3000:]
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env)
    try:
        out: list[str] = []

        def run(code: str) -> dict:
            return kc.execute_interactive(code, timeout=300, output_hook=lambda m: out.append(
                m["content"].get("text", "")) if m["msg_type"] == "stream" else None)["content"]

        assert run("%load_ext trainmeter")["status"] == "ok"
        reply = run(CELL.format(runs=tmp_path / "runs", torchrun=torchrun, script=script, args=args))
        assert reply["status"] == "ok", (reply, "".join(out)[-3000:])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    for rank in (0, 1):
        cell = json.loads((tmp_path / f"rank{rank}-cell.json").read_text())
        assert cell == json.loads((tmp_path / f"rank{rank}-bare.json").read_text()) and len(cell) == STEPS
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    launch = json.loads((run_dir / "passport.json").read_text())
    d = launch["distributed"]
    assert (d["role"], d["world_size"], d["global_steps"]) == ("launch", 2, STEPS)
    assert d["global_tokens"] == 2 * STEPS * BATCH * SEQ  # every rank's first step counted too
    for rank in (0, 1):
        own = json.loads((run_dir / f"rank-{rank}" / "passport.json").read_text())
        assert (own["status"], own["steps"], own["tokens"]) == ("completed", STEPS, STEPS * BATCH * SEQ)
        # the counted pass ran on a meta copy of the sharded model (global shapes), and the rank trained on
        assert own["compute"]["counted_flops_per_token"] == 6 * (2 * WIDTH * WIDTH + WIDTH * VOCAB)
