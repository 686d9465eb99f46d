"""2-GPU check (run on a lent machine with two GPUs): one DDP launch on NCCL, recorded as one run.

    python benchmarks/gpu_ranks_check.py [--steps 40] [--out DIR]

Launches ``torchrun --standalone --nproc_per_node=2`` on this file (``--worker``):
each rank trains a tiny GPT-like model (embedding, 2 blocks of MLPs, head; bf16
autocast) under DDP on NCCL, on ``cuda:<LOCAL_RANK>``, inside ``tm.monitor(...,
convention="hf")``. Then checks, from the files only:

- one launch folder under the run root, seats ``rank-0`` and ``rank-1``;
- the launch passport: ``world_size`` 2, ``ranks_recorded`` 2, status ``completed``,
  ``global_tokens`` = 2 x steps x batch x seq exactly and = the sum of the ranks' tokens;
- each rank's ``distributed.device.uuid`` known and different, and each rank's ladder
  (``distributed.gpu_ladder``) on a different device;
- MFU over all ranks: ``mfu_devices`` 2 and ``mfu_session["hf"]`` shown (a peak is known for the card).

With fewer than two CUDA devices it prints ``SKIP: ...`` and exits 0 (nothing is launched).
Writes ``gpu_ranks_check.json`` to ``--out`` (or $OUT). Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BATCH, SEQ, VOCAB, WIDTH = 8, 128, 1024, 256


def cuda_devices() -> int:
    """CUDA devices this process could use (0 without torch or CUDA); creates no CUDA context."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no GPU here
        return 0


def worker(run_root: str, steps: int) -> None:
    """One rank (started by torchrun)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import trainmeter as tm

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                  torch.nn.Linear(4 * WIDTH, WIDTH)) for _ in range(2)]
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, WIDTH), *blocks, torch.nn.Linear(WIDTH, VOCAB)).cuda()
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    with tm.monitor(name="ddp2", run_dir=run_root, convention="hf", interval_s=0.5, widget=False):
        for _ in range(steps):
            ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = ddp(ids)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


def check(run_root: Path, steps: int) -> dict:
    """The checks on the launch folder; ``report["ok"]`` says whether all passed."""
    checks: dict[str, bool] = {}
    folders = [p for p in run_root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    checks["one launch folder"] = len(folders) == 1
    report: dict = {"folders": [p.name for p in folders], "checks": checks}
    if not folders:
        report["ok"] = False
        return report
    launch = folders[0]
    seats = sorted(p.name for p in launch.iterdir() if p.is_dir())
    checks["seats rank-0 and rank-1"] = seats == ["rank-0", "rank-1"]
    passport = json.loads((launch / "passport.json").read_text())
    d = passport["distributed"]
    report["distributed"] = {k: d.get(k) for k in ("world_size", "ranks_recorded", "global_steps", "global_tokens",
                                                   "mfu", "mfu_session", "mfu_devices", "mfu_missing", "notes")}
    checks["world_size 2"] = d["world_size"] == 2 and d["ranks_recorded"] == 2
    checks["status completed"] = passport["status"] == "completed"
    expected = 2 * steps * BATCH * SEQ
    checks[f"global tokens exact ({expected})"] = d["global_tokens"] == expected == sum(r["tokens"]
                                                                                        for r in d["ranks"])
    uuids = [(r.get("device") or {}).get("uuid") for r in d["ranks"]]
    report["uuids"] = uuids
    checks["per-rank UUIDs known and different"] = all(uuids) and len(set(uuids)) == 2
    ladder = d.get("gpu_ladder") or {}
    report["ladder"] = [(row["rank"], row["index"], row["uuid"], row["sentence"]) for row in ladder.get("ranks", [])]
    report["ladder_missing"] = ladder.get("missing")
    checks["per-rank ladders on different devices"] = len({row["uuid"] for row in ladder.get("ranks", [])}) == 2
    checks["MFU over 2 devices shown"] = d.get("mfu_devices") == 2 and (d.get("mfu_session") or {}).get("hf") is not None
    report["ok"] = all(checks.values())
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.run_root, args.steps)
        return 0
    found = cuda_devices()
    if found < 2:
        print(f"SKIP: this check needs 2 CUDA GPUs; found {found}")
        return 0
    out = Path(args.out)
    run_root = out / "gpu_ranks_runs"
    run_root.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMETER_")}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           "--worker", "--run-root", str(run_root), "--steps", str(args.steps)]
    done = subprocess.run(cmd, env=env, timeout=540)
    report = {"torchrun_returncode": done.returncode, **check(run_root, args.steps)}
    report["ok"] = report["ok"] and done.returncode == 0
    (out / "gpu_ranks_check.json").write_text(json.dumps(report, indent=1, default=str))
    for name, ok in report["checks"].items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    print(json.dumps({k: report.get(k) for k in ("distributed", "uuids", "ladder", "ladder_missing")}, default=str))
    print("OK" if report["ok"] else "FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
