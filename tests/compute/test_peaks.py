"""Dense peaks per card: matched by real NVML names, most specific first, each with its source."""

from __future__ import annotations

import dataclasses

import pytest

from trainmeter.compute.peaks import DTYPES, PeakRow, normalize_dtype, peak_flops, table_rows, why_no_peak

# (NVML name, card matched, dense BF16 TFLOP/s or None, dense FP16 TFLOP/s)
NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5, 989.5),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5, 756.5),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5, 835.5),
    ("NVIDIA H200", "H200 SXM", 989.5, 989.5),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5, 835.5),
    ("NVIDIA GH200 480GB", "GH200", 989.5, 989.5),
    ("NVIDIA B200", "B200", 2250.0, 2250.0),
    ("NVIDIA GB200", "GB200", 2500.0, 2500.0),
    ("NVIDIA L40S", "L40S", 362.0, 362.0),
    ("NVIDIA L4", "L4", 121.0, 121.0),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 312.0, 312.0),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB", 312.0, 312.0),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 312.0, 312.0),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 312.0, 312.0),
    ("NVIDIA A10G", "A10G", 70.0, 70.0),
    ("Tesla T4", "T4", None, 65.0),
    ("Tesla V100-SXM2-16GB", "V100 SXM2", None, 125.0),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 165.2, 165.2),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090", 71.0, 71.0),
]


@pytest.mark.parametrize(("name", "card", "bf16", "fp16"), NAMES, ids=[n[0] for n in NAMES])
def test_real_nvml_names_match_their_card_and_dense_peak(name: str, card: str, bf16: float | None, fp16: float) -> None:
    row = peak_flops(name, "fp16")
    assert row is not None
    assert (row.card, row.dtype, row.tflops, row.provenance) == (card, "fp16", fp16, "detected")
    assert "nvml-gpm.md" in row.source
    bf = peak_flops(name)
    assert (bf.tflops if bf else None) == bf16


def test_t4_has_no_bf16_and_says_so() -> None:
    assert peak_flops("Tesla T4", "bf16") is None
    reason = why_no_peak("Tesla T4", "bf16")
    assert "T4 has no dense bf16" in reason and "--peak-tflops X --peak-source TEXT" in reason
    assert why_no_peak("Tesla T4", "fp16") is None


@pytest.mark.parametrize(
    ("name", "card"),
    [
        ("NVIDIA L40S", "L40S"),  # not the L4 row (a substring bug seen elsewhere)
        ("NVIDIA GH200 480GB", "GH200"),  # not H200
        ("NVIDIA GB200", "GB200"),  # not B200
        ("NVIDIA H200 NVL", "H200 NVL"),  # not H200 SXM
        ("NVIDIA H100 NVL", "H100 NVL"),  # not H100 SXM
        ("A100-SXM4-40GB", "A100 SXM4 40GB"),  # old drivers: no NVIDIA prefix
        ("GeForce RTX 3090", "GeForce RTX 3090"),
        ("NVIDIA A10", "A10"),  # not A100, not A10G
    ],
)
def test_most_specific_row_wins(name: str, card: str) -> None:
    row = peak_flops(name)
    assert row is not None and row.card == card


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA L40",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA H800",
        "AMD Instinct MI300X",
        "cpu",
        "",
    ],
)
def test_unknown_or_unlisted_cards_get_no_peak(name: str) -> None:
    assert peak_flops(name) is None
    assert "--peak-tflops X --peak-source TEXT" in why_no_peak(name)


def test_bare_h100_name_is_ambiguous_and_gets_no_peak() -> None:
    assert peak_flops("NVIDIA H100") is None
    assert "SXM, PCIe or NVL" in why_no_peak("NVIDIA H100")


def test_geforce_uses_fp32_accumulate_rate_not_fp16_accumulate_headline() -> None:
    row = peak_flops("NVIDIA GeForce RTX 4090", "bf16")
    assert row is not None and row.tflops == 165.2
    assert "FP32 accumulate" in row.source


def test_dtype_names_and_torch_dtype_strings_are_accepted() -> None:
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("float16") == "fp16"
    assert normalize_dtype("torch.float8_e4m3fn") == "fp8"
    assert peak_flops("NVIDIA H100 80GB HBM3", "torch.bfloat16").tflops == 989.5
    assert peak_flops("NVIDIA H100 80GB HBM3", "tf32").tflops == 494.5
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp8").tflops == 1979.0
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None


def test_bad_dtype_raises_naming_value_and_valid_ones() -> None:
    with pytest.raises(ValueError, match="'int4'.*bf16, fp16, tf32, fp8"):
        peak_flops("NVIDIA H100 80GB HBM3", "int4")
    with pytest.raises(ValueError, match="tf32"):
        normalize_dtype("torch.float32")


def test_peak_row_is_frozen_and_converts_to_flop_per_s() -> None:
    row = peak_flops("NVIDIA L4")
    assert isinstance(row, PeakRow) and row.flops_per_s == 121e12
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.tflops = 1.0  # type: ignore[misc]


def test_every_row_cites_a_source_and_has_positive_peaks() -> None:
    rows = table_rows()
    assert len(rows) >= 20
    for card, _pattern, peaks, source in rows:
        assert source and "nvml-gpm.md" in source, card
        assert set(peaks) == set(DTYPES)
        assert all(v is None or v > 0 for v in peaks.values()), card


def test_a10g_row_says_its_figure_is_approximate() -> None:
    row = peak_flops("NVIDIA A10G")
    assert row is not None and "approximate" in row.source
    assert peak_flops("NVIDIA A10G", "tf32") is None
