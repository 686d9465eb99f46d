"""GPU check (run on a lent GPU machine only): the ladder on two known loads.

    python benchmarks/gpu_ladder_check.py [--seconds 8] [--out DIR]

Phase 1, GEMM-heavy: bf16 8192^3 matmuls back to back (tensor cores busy).
Phase 2, launch-bound: a Python loop of 1-element adds (GPU-Util high, SM activity low).
The sampler runs at 2 Hz on the devices this process's CUDA context uses (mapped by
UUID); each phase is one averaging window. Prints, per phase, the window averages (GPM
values included), the ladder sentence and whether the expected rung was named; also the
torch-vs-NVML UUID mapping. Writes ``gpu_ladder_check.json`` to ``--out`` (or $OUT).
Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    import torch

    from trainmeter.core.clock import MonotonicClock
    from trainmeter.gpu.ladder import build_ladder
    from trainmeter.gpu.sampler import GpuSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU")
        return 1
    dev = torch.device("cuda:0")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    clock = MonotonicClock()
    sampler = GpuSampler.for_run(None, clock=clock, interval_s=0.5)
    report: dict = {
        "torch_uuid": "GPU-" + str(torch.cuda.get_device_properties(0).uuid),
        "selection": None if sampler.selection is None else sampler.selection.how,
        "nvml_devices": {i: (d.name, d.uuid, d.gpm_supported) for i, d in sampler.devices.items()},
        "unavailable_reason": sampler.unavailable_reason,
        "driver": sampler.driver_version,
        "phases": {},
    }
    ok = bool(sampler.indices) and any(d.uuid == report["torch_uuid"] for d in sampler.devices.values())
    sampler.start()
    time.sleep(1.2)  # let GPM prime its first pair

    def gemm() -> None:
        for _ in range(20):
            a @ b

    tiny = torch.zeros(1, device=dev)

    def launch_bound() -> None:
        for _ in range(2000):
            tiny.add_(1.0)

    flop_per_call = 20 * 2 * 8192**3
    for name, work, expect in (("gemm", gemm, (None, "mfu")), ("launch_bound", launch_bound, ("sm_activity",))):
        sampler.begin_window(clock())
        t0, calls = clock(), 0
        while clock() - t0 < args.seconds:
            work()
            calls += 1
            if calls % 10 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        t1 = clock()
        time.sleep(0.6)  # one more sample lands inside the window's end
        sampler.end_window(t1)
        avgs = sampler.window_averages()
        flop_per_s = flop_per_call * calls / (t1 - t0) if name == "gemm" else None
        mfu = None if flop_per_s is None else flop_per_s / 989.5e12  # H100/H200 SXM dense BF16
        phase = {}
        for index, avg in avgs.items():
            ladder = build_ladder(avg, mfu=mfu, flop_per_s=flop_per_s)
            named_ok = ladder.falloff in expect
            ok = ok and named_ok
            phase[index] = {
                "means": dict(avg.means),
                "n_samples": avg.n_samples,
                "sentence": ladder.sentence,
                "falloff": ladder.falloff,
                "expected": list(expect),
                "named_expected_rung": named_ok,
                "ofu": ladder.ofu.value,
                "mfu_assumed_989_5_tflops": mfu,
            }
            print(f"[{name}] GPU {index}: {ladder.sentence} (expected {expect}: {'ok' if named_ok else 'FAIL'})")
            print("   " + ", ".join(f"{k}={v:.3g}" for k, v in avg.means.items() if v is not None))
        report["phases"][name] = phase
    sampler.stop()
    report["status"] = {i: st.last_error for i, st in sampler.status().items()}
    report["ok"] = ok
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_ladder_check.json").write_text(json.dumps(report, indent=1, default=str))
    print("uuid mapping:", report["torch_uuid"], "->", report["nvml_devices"])
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
