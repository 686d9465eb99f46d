"""benchmarks/gpu_ladder_check.py's dry path: every step of the prepared GPU check runs on the CPU and a fake NVML."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_ladder_check.py"


@pytest.mark.slow
def test_dry_run_writes_the_ladder_calibration_and_formula_vs_hardware_side_by_side(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_ladder_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_ladder_check.json").read_text())
    assert report["dry_run"] is True and report["ok"] is True
    assert set(report["phases"]) == {"gemm", "launch_bound"}
    assert report["table_bf16"]["card"] == "H100 SXM"
    # the SM count (torch's; none on the dry run's CPU), the MIG state and the row chosen, so a lent GPU confirms them
    assert report["table_card"] == "H100 SXM" and report["table_card_sms"] == 132 and report["sm_count"] is None
    assert report["mig_enabled"] == {"0": False}
    fp32 = report["calibration"]["fp32"]["ceiling"]
    assert fp32["provenance"] == "measured" and fp32["flops_per_s"] > 0
    train = report["training"]
    assert train["mfu_formula_megatron"] is not None and train["mfu_counted"] is not None
    check = train["crosscheck"]["0"]
    assert check["ofu"] is not None and check["observed_flops_per_s"] is not None and check["verdict"]
    assert train["of_achievable_megatron"] is not None  # the calibration before the run serves it
