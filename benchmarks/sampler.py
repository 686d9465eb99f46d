"""CPU cost of the GPU sampler: 8 devices at 2 Hz for ~20 s, as a fraction of one core.

    .venv/bin/python benchmarks/sampler.py [--seconds 20] [--devices 8]
        [--interval-s 0.5] [--backend fake|nvml]

``fake`` (default) uses the scripted FakeNvml (tests/fakes/gpu/fake.py: the script puts the repository root and
src/ on ``sys.path``; 8 x H100 with GPM); ``nvml`` uses the real
NVML on a GPU machine (every NVML device). Prints process CPU seconds / wall seconds
while the sampler threads run and the main thread only waits. Target: < 1% of one core.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO / "src", REPO):  # trainmeter, and the test fakes (tests/fakes/gpu)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from trainmeter.core.clock import MonotonicClock  # noqa: E402
from trainmeter.gpu.sampler import GpuSampler  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--interval-s", type=float, default=0.5)
    parser.add_argument("--backend", choices=("fake", "nvml"), default="fake")
    args = parser.parse_args()
    clock = MonotonicClock()
    if args.backend == "fake":
        from tests.fakes.gpu.fake import FakeNvml

        backend = FakeNvml(["h100_sxm"] * args.devices, clock=clock)
        sampler = GpuSampler(backend, range(args.devices), clock=clock, interval_s=args.interval_s)
    else:
        from tests.fakes.gpu.fake import sampler_for_run

        from trainmeter.gpu.backend import open_gpu_backend

        sampler = sampler_for_run("all", clock=clock, open_backend=open_gpu_backend, interval_s=args.interval_s)
        if sampler.unavailable_reason:
            raise SystemExit(f"no NVML: {sampler.unavailable_reason}")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    sampler.start()
    threading.Event().wait(args.seconds)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    sampler.stop()
    n = sum(st.n_samples for st in sampler.status().values())
    errors = sum(st.n_errors for st in sampler.status().values())
    wall_s, cpu_s = wall1 - wall0, cpu1 - cpu0
    print(
        f"backend={args.backend} devices={len(sampler.indices)} interval_s={args.interval_s} "
        f"wall_s={wall_s:.1f} samples={n} errors={errors} cpu_s={cpu_s:.3f} "
        f"cpu_per_sample_ms={1000 * cpu_s / max(n, 1):.3f} "
        f"fraction_of_one_core={cpu_s / wall_s:.4%}"
    )


if __name__ == "__main__":
    main()
