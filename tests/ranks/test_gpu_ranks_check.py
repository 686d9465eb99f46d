"""benchmarks/gpu_ranks_check.py: skips cleanly without two GPUs; its checks read what the merge writes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from trainmeter.ranks.merge import write_launch_passport

from .test_rank_ladder import node_gpu_section, uuid_device

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_ranks_check.py"


def load():
    spec = importlib.util.spec_from_file_location("gpu_ranks_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_two_gpus_it_skips_with_a_message_and_exit_status_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("SKIP: this check needs 2 CUDA GPUs; found 0")
    assert list(tmp_path.iterdir()) == []  # nothing launched


def test_its_checks_pass_on_a_launch_folder_written_by_the_merge(tmp_path):
    check = load()
    steps, per_rank = 3, 3 * check.BATCH * check.SEQ
    launch = tmp_path / "20260101T000000Z-ddp2"
    peak = {"tflops": 989.0, "card": "H200", "dtype": "bf16", "source": "datasheet", "provenance": "detected"}
    for k in (0, 1):
        seat = launch / f"rank-{k}"
        seat.mkdir(parents=True)
        ident = {"kind": "rank", "rank": k, "local_rank": k, "world_size": 2, "node": "node-x", "pid": None}
        seat.joinpath("events.jsonl").write_text(json.dumps(ident) + "\n")
        passport = {"name": "ddp2", "status": "completed", "steps": steps, "tokens": per_rank, "elapsed_s": 2.0,
                    "phases_s": {"train": 1.5},
                    "compute": {"convention": "hf", "flops_per_token": {"hf": 1e7}, "mfu": {"hf": 0.01},
                                "peak": peak},
                    "distributed": {"role": "rank", "backend": "nccl", "device": uuid_device(k)}}
        if k == 0:
            passport["gpu"] = node_gpu_section()
        seat.joinpath("passport.json").write_text(json.dumps(passport))
    write_launch_passport(launch, "ddp2")
    report = check.check(tmp_path, steps)
    assert report["ok"], report["checks"]
    bad = check.check(tmp_path, steps + 1)  # a token count off by one step fails
    assert not bad["ok"] and not bad["checks"][f"global tokens exact ({2 * (steps + 1) * check.BATCH * check.SEQ})"]
