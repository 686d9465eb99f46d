"""GPU check (one prepared script for a lent GPU machine): ladder, peak table, calibration, formula vs hardware.

    python benchmarks/gpu_ladder_check.py [--seconds 8] [--train-seconds 20] [--out DIR]
    python benchmarks/gpu_ladder_check.py --dry-run --out DIR      # CPU + fake NVML: the script's own path

1. Ladder on two known loads (sampler at 2 Hz on this process's CUDA devices, mapped by UUID; each phase one
   averaging window): bf16 8192^3 matmuls back to back (tensor cores busy), then a Python loop of 1-element adds
   (GPU-Util high, SM activity low); the expected fall-off rung must be named.
2. Peak table: the device's SM count (torch), its MIG state (NVML, and the torch name) and the row chosen by torch
   name, memory size and SM count (a MIG instance's share), its dense bf16/fp16/tf32 peaks and sources.
3. Calibration: ``tm.calibrate()`` on the device; a measured ceiling above 1.05 x the table's peak fails (the
   table's figure would be too low, MFU too high).
4. A real training step: a small causal transformer LM, bf16 autocast, AdamW, under ``tm.monitor`` (convention
   megatron): MFU by formula, MFU by counted FLOPs (FlopCounterMode), OFU from tensor activity and "of
   achievable" side by side, and the formula-vs-hardware verdict (gpu.crosscheck) from the passport.

Writes ``gpu_ladder_check.json`` to ``--out`` (or $OUT); exit status 1 if a check fails. ``--dry-run`` runs every
step on the CPU against a scripted fake NVML (no GPU), with tiny sizes and a declared peak, so the plumbing is
tested anywhere (tests/gpu/test_gpu_ladder_check.py); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO / "src", REPO):  # trainmeter, and the dry run's fake NVML (tests/fakes/gpu)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def _lm(torch: Any, *, vocab: int, d: int, layers: int, heads: int, seq: int) -> Any:
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                                                    norm_first=True) for _ in range(layers)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

        def forward(self, x: Any) -> Any:
            h = self.embed(x)
            mask = self.mask[: x.shape[1], : x.shape[1]]
            for block in self.blocks:
                h = block(h, src_mask=mask, is_causal=True)
            return self.head(self.norm(h))

    return LM()


def ladder_phases(torch: Any, dev: Any, sampler: Any, clock: Any, seconds: float, size: int,
                  peak_flops_per_s: float | None) -> tuple[dict[str, Any], bool]:
    """Phase 1: the ladder on a GEMM load and a launch-bound load."""
    from trainmeter.gpu.ladder import build_ladder

    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    tiny = torch.zeros(1, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def gemm() -> None:
        for _ in range(20):
            a @ b

    def launch_bound() -> None:
        for _ in range(2000):
            tiny.add_(1.0)

    ok = True
    out: dict[str, Any] = {}
    flop_per_call = 20 * 2 * size**3
    for name, work, expect in (("gemm", gemm, (None, "mfu")), ("launch_bound", launch_bound, ("sm_activity",))):
        sampler.begin_window(clock())
        t0, calls = clock(), 0
        while clock() - t0 < seconds:
            work()
            calls += 1
            if calls % 10 == 0:
                sync()
            if dev.type != "cuda":  # dry run: the fake clock moves and the sampler steps by hand
                from tests.fakes.gpu.fake import sampler_step

                clock.advance(0.5)
                sampler_step(sampler, clock())
        sync()
        t1 = clock()
        if dev.type == "cuda":
            time.sleep(0.6)  # one more sample lands inside the window's end
        sampler.end_window(t1)
        flop_per_s = flop_per_call * calls / (t1 - t0) if name == "gemm" else None
        mfu = flop_per_s / peak_flops_per_s if flop_per_s and peak_flops_per_s else None
        phase = {}
        for index, avg in sampler.window_averages().items():
            ladder = build_ladder(avg, mfu=mfu, flop_per_s=flop_per_s)
            named = ladder.falloff in expect
            ok = ok and (named or dev.type != "cuda")
            phase[index] = {"means": dict(avg.means), "n_samples": avg.n_samples, "sentence": ladder.sentence,
                            "falloff": ladder.falloff, "expected": list(expect), "named_expected_rung": named,
                            "ofu": ladder.ofu.value, "mfu_vs_table_peak": mfu, "gemm_flop_per_s": flop_per_s}
            print(f"[{name}] GPU {index}: {ladder.sentence} (expected {expect}: {'ok' if named else 'FAIL'})")
        out[name] = phase
    return out, ok


def calibration(tm: Any, dev: Any, name: str, memory_bytes: int | None, sms: int | None,
                dry: bool) -> tuple[dict[str, Any], bool]:
    """Phases 2 and 3: the table's peaks for this card, and the measured ceilings against them."""
    from tests.compute.peak_lookup import why_no_peak

    from trainmeter.compute.peaks import peak_flops

    dtypes = ("fp32", "bf16") if dry else ("bf16", "fp16", "tf32")
    cal = tm.calibrate(dtypes, device=dev, size=64 if dry else 8192, min_seconds=0.01 if dry else 1.0)
    ok = True
    rows: dict[str, Any] = {}
    for dtype in dtypes:
        ceiling = cal.ceilings.get(dtype)
        table = None if dtype == "fp32" or dry else peak_flops(name, dtype, memory_bytes=memory_bytes, sm_count=sms)
        ratio = (ceiling.flops_per_s / table.flops_per_s) if ceiling and table else None
        within = ratio is None or ratio <= 1.05
        ok = ok and within
        rows[dtype] = {"ceiling": None if ceiling is None else ceiling.to_dict(),
                       "table_tflops": None if table is None else table.tflops,
                       "table_card": None if table is None else table.card,
                       "table_source": None if table is None else table.source,
                       "no_peak": None if table is not None or dtype == "fp32" else why_no_peak(
                           name, dtype, memory_bytes=memory_bytes, sm_count=sms),
                       "ceiling_over_peak": ratio, "ceiling_within_peak": within, "skipped": cal.skipped.get(dtype)}
        c = "-" if ceiling is None else f"{ceiling.flops_per_s / 1e12:.1f} TFLOP/s"
        t = "-" if table is None else f"{table.tflops:g} TFLOP/s ({table.card})"
        print(f"[calibrate] {dtype}: measured {c}, table {t}, ratio {ratio if ratio is None else round(ratio, 3)}")
    return rows, ok


def training(tm: Any, torch: Any, dev: Any, out_dir: Path, seconds: float, dry: bool) -> tuple[dict[str, Any], bool]:
    """Phase 4: a real LM training run under the monitor; MFU three ways and the verdict from its passport."""
    seq, batch = (16, 2) if dry else (1024, 8)
    model = _lm(torch, vocab=512 if dry else 32768, d=32 if dry else 1024, layers=2 if dry else 8,
                heads=2 if dry else 16, seq=seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    flags: dict[str, Any] = {"convention": "megatron", "run_dir": out_dir / "runs", "interval_s": 2.0}
    if dry:
        flags.update(peak_tflops=989.5, peak_source="dry run: H100 SXM dense BF16 from the table")
    autocast = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    loss_fn = torch.nn.functional.cross_entropy
    t0 = time.perf_counter()
    steps = 0
    with _monitor(tm, flags, dry) as m:
        while time.perf_counter() - t0 < seconds or steps < 3:
            x = torch.randint(0, model.head.out_features, (batch, seq), device=dev)
            with autocast:
                logits = model(x)
                loss = loss_fn(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
    passport = json.loads((m.run_dir / "passport.json").read_text())
    compute, gpu = passport["compute"], passport.get("gpu") or {}
    checks = gpu.get("crosscheck") or {}
    side = {"mfu_formula_megatron": compute["mfu"].get("megatron"), "mfu_counted": compute["mfu"].get("counted"),
            "of_achievable_megatron": (compute.get("of_achievable") or {}).get("megatron"),
            "peak": compute.get("peak"), "mfu_missing": compute.get("mfu_missing"), "steps": steps,
            "crosscheck": checks, "ladder": gpu.get("ladders")}
    for index, c in checks.items():
        print(f"[train] GPU {index}: MFU formula {c.get('formula_mfu')}, counted {c.get('counted_mfu')}, "
              f"OFU {c.get('ofu')}, observed tensor FLOP/s {c.get('observed_flops_per_s')}; {c.get('sentence')}")
    agree = all(c.get("verdict") in ("agree", None) for c in checks.values())
    ok = side["mfu_formula_megatron"] is not None and side["mfu_counted"] is not None and (agree or dry)
    side["ok"] = ok
    return side, ok


def _monitor(tm: Any, flags: dict[str, Any], dry: bool) -> Any:
    if not dry:
        return tm.monitor(**flags)
    from tests.fakes.gpu.fake import FakeNvml, open_fake

    from trainmeter.api import run_monitored
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.gpu.extension import GpuExtension
    from trainmeter.options import make_options

    options = make_options(**flags)
    exts = [GpuExtension(open_backend=lambda clock: open_fake(FakeNvml(["h100_sxm"], clock=clock)))
            if e.name == "gpu" else e for e in default_extensions(options)]
    return run_monitored(make_monitor(options, extensions=exts))


def main(argv: list[str] | None = None) -> int:
    import torch
    from tests.compute.peak_lookup import match_card, why_no_peak
    from tests.fakes.gpu.fake import FakeNvml, sampler_for_run, sampler_step

    import trainmeter as tm
    from trainmeter.compute.peaks import TABLE, peak_flops
    from trainmeter.core.clock import FakeClock, MonotonicClock
    from trainmeter.gpu.backend import open_gpu_backend
    from trainmeter.gpu.sampler import GpuSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--train-seconds", type=float, default=20.0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--dry-run", action="store_true", help="CPU + fake NVML, tiny sizes: the script's own path")
    args = parser.parse_args(argv)
    dry = args.dry_run
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not dry and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (or --dry-run)")
        return 1
    dev = torch.device("cpu") if dry else torch.device("cuda:0")
    if dry:
        clock: Any = FakeClock(0.0)
        fake = FakeNvml(["h100_sxm"], clock=clock)
        sampler = GpuSampler(fake, (0,), clock=clock)
        name, memory, torch_uuid = fake.device_info(0).name, fake.device_info(0).mem_total_bytes, fake_uuid0(fake)
        sms = None  # no torch device: the fake NVML reads no SM count
    else:
        clock = MonotonicClock()
        sampler = sampler_for_run(None, clock=clock, open_backend=open_gpu_backend, interval_s=0.5)
        props = torch.cuda.get_device_properties(0)
        name, memory, torch_uuid = torch.cuda.get_device_name(0), props.total_memory, "GPU-" + str(props.uuid)
        sms = props.multi_processor_count
    table = peak_flops(name, "bf16", memory_bytes=memory, sm_count=sms)
    card = match_card(name, memory_bytes=memory)
    card_sms = next((r.sms for r in TABLE if r.card == card), None)
    mig = {i: d.mig_enabled for i, d in sampler.devices.items()}
    print(f"[device] {name}: {sms} SMs (torch multi_processor_count; the table's {card or 'no row'}: {card_sms}), "
          f"MIG mode {mig or 'not read'} (NVML), the name {'says' if ' MIG ' in name else 'does not say'} MIG; "
          f"peak row: " + (f"{table.card}, {table.tflops:g} TFLOP/s bf16" if table else
                           f"none ({why_no_peak(name, 'bf16', memory_bytes=memory, sm_count=sms)})"))
    report: dict[str, Any] = {
        "dry_run": dry, "device_name": name, "torch_uuid": torch_uuid,
        "selection": None if sampler.selection is None else sampler.selection.how,
        "nvml_devices": {i: (d.name, d.uuid, d.gpm_supported, d.mig_enabled) for i, d in sampler.devices.items()},
        "sm_count": sms, "table_card": card, "table_card_sms": card_sms, "mig_enabled": mig,
        "unavailable_reason": sampler.unavailable_reason, "driver": sampler.driver_version,
        "table_bf16": None if table is None else {"tflops": table.tflops, "card": table.card, "source": table.source},
    }
    ok = bool(sampler.indices) and any(d.uuid == torch_uuid for d in sampler.devices.values())
    if dry:
        for _ in range(3):
            sampler_step(sampler, clock())
            clock.advance(0.5)
    else:
        sampler.start()
        time.sleep(1.2)  # let GPM prime its first pair
    phases, phases_ok = ladder_phases(torch, dev, sampler, clock, 1.0 if dry else args.seconds, 64 if dry else 8192,
                                      table.flops_per_s if table else None)
    sampler.stop()
    report["phases"] = phases
    report["status"] = {i: st.last_error for i, st in sampler.status().items()}
    report["calibration"], cal_ok = calibration(tm, dev, name, memory, sms, dry)
    report["training"], train_ok = training(tm, torch, dev, out, 1.6 if dry else args.train_seconds, dry)
    report["checks"] = {"uuid_mapped": ok, "ladder": phases_ok, "calibration": cal_ok, "training": train_ok}
    report["ok"] = all(report["checks"].values())
    (out / "gpu_ladder_check.json").write_text(json.dumps(report, indent=1, default=str))
    print("checks:", report["checks"])
    print("OK" if report["ok"] else "FAILED")
    return 0 if report["ok"] else 1


def fake_uuid0(fake: Any) -> str:
    """The fake device 0's UUID (the dry run's stand-in for torch's)."""
    return fake.device_info(0).uuid


if __name__ == "__main__":
    sys.exit(main())
