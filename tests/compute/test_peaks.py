"""Dense peaks per card: matched by real NVML names, most specific first, each with its source."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.compute.peak_lookup import LEFT_OUT, SM_SOURCES, match_card, why_no_peak
from trainmeter.compute.peaks import (
    AMBIGUOUS,
    BY_MEMORY_GIB,
    BY_PCI_DEVICE_ID,
    DTYPES,
    MIG_NAME,
    TABLE,
    VGPU_NAME,
    PeakRow,
    normalize_dtype,
    peak_flops,
    peak_for_run,
)

MIB = 1024**2

# Real device-name strings (NVML, torch.cuda under CUDA, torch.cuda under ROCm) -> the card they must match.
REAL_NAMES = {
    "NVIDIA GB300": "GB300",
    "NVIDIA GB200": "GB200",
    "NVIDIA B300 SXM6 AC": "B300",
    "NVIDIA B200": "B200",
    "NVIDIA B100": "B100",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA GH200 144G HBM3e": "GH200",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H800 80GB HBM3": "H800 SXM",
    "NVIDIA H800": "H800 SXM",
    "NVIDIA H800 PCIe": "H800 PCIe",
    "NVIDIA H20": "H20",
    "NVIDIA L40S": "L40S",
    "NVIDIA L40": "L40",
    "NVIDIA L4": "L4",
    "NVIDIA A800-SXM4-80GB": "A800",
    "NVIDIA A800 80GB PCIe": "A800",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A100-SXM-64GB": "A100",
    "NVIDIA A40": "A40",
    "NVIDIA A30": "A30",
    "NVIDIA A16": "A16 (one GPU)",
    "NVIDIA A2": "A2",
    "NVIDIA GeForce RTX 3070 Ti": "GeForce RTX 3070 Ti",
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": "A10",
    "Tesla T4": "T4",
    "Tesla V100S-PCIE-32GB": "V100S PCIe",
    "Tesla V100-PCIE-16GB": "V100 PCIe",
    "Tesla V100-PCIE-32GB": "V100 PCIe",
    "Tesla V100-SXM2-16GB": "V100 SXM2",
    "Tesla V100-SXM2-32GB": "V100 SXM2",
    "Tesla P100-PCIE-16GB": "P100 PCIe",
    "Tesla P100-PCIE-12GB": "P100 PCIe",
    "Tesla P100-SXM2-16GB": "P100 SXM2",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX PRO 6000 Blackwell Max-Q",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX PRO 6000 Blackwell Workstation",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX PRO 6000 Blackwell Server",
    "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
    "NVIDIA RTX A6000": "RTX A6000",
    "NVIDIA GeForce RTX 5090": "GeForce RTX 5090",
    "NVIDIA GeForce RTX 5080": "GeForce RTX 5080",
    "NVIDIA GeForce RTX 5070": "GeForce RTX 5070",
    "NVIDIA GeForce RTX 4080": "GeForce RTX 4080",
    "GeForce RTX 4080": "GeForce RTX 4080",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
    "GeForce RTX 3090": "GeForce RTX 3090",
    "AMD Instinct MI355X": "MI355X",
    "AMD Instinct MI350X": "MI350X",
    "AMD Instinct MI325X": "MI325X",
    "AMD Instinct MI300X": "MI300X",
    "AMD Instinct MI300A": "MI300A",
    "AMD Instinct MI300X VF": "MI300X",
    "AMD Instinct MI250X": "MI250X (one GCD)",
    "AMD Instinct MI250": "MI250 (one GCD)",
}


def _rows_matching(name: str) -> list[str]:
    normalized = " ".join(name.lower().replace("_", " ").split())
    return [r.card for r in TABLE if re.search(r.pattern, normalized)
            and not (r.exclude and re.search(r.exclude, normalized))]


@pytest.mark.parametrize(("name", "card"), sorted(REAL_NAMES.items()), ids=sorted(REAL_NAMES))
def test_every_real_device_name_matches_exactly_one_row(name: str, card: str) -> None:
    assert _rows_matching(name) == [card]
    assert match_card(name) == card


def test_every_row_is_matched_by_some_real_device_name() -> None:
    assert {r.card for r in TABLE} == set(REAL_NAMES.values())


@pytest.mark.parametrize("row", TABLE, ids=[r.card for r in TABLE])
def test_every_row_cites_a_source_and_never_divides_by_a_sparse_figure(row) -> None:
    assert row.source.strip()
    assert set(row.quoted) == set(DTYPES)
    if row.secondary:
        assert row.source.startswith("secondary:"), row.card
    else:
        assert re.search(r"\b(NVIDIA|AMD)\b.*(datasheet|whitepaper|page|specifications|aiconfigurator)",
                         row.source), row.card
    stated_sparse = "quoted with sparsity" in row.source
    assert stated_sparse == row.sparse_quoted, row.card
    for dtype, quoted in row.quoted.items():
        dense = row.peaks[dtype]
        if quoted is None:
            assert dense is None
            continue
        assert quoted > 0
        assert dense == (quoted / 2 if row.sparse_quoted else quoted), (row.card, dtype)
        row_peak = peak_flops(next(n for n, c in REAL_NAMES.items() if c == row.card), dtype)
        assert row_peak is not None and row_peak.tflops == dense


# what a source says where a figure comes from a page other than the vendor's own document
THIRD_PARTY = re.compile(r"as reproduced|as transcribed|quotes? (it|them)|public [a-z0-9/ ]{0,20}(note|report|table|code)"
                         r"|spec copies|press copies|per (Microway|Baseten)|reseller|hmc-tech|deepseek", re.IGNORECASE)


@pytest.mark.parametrize("row", TABLE, ids=[r.card for r in TABLE])
def test_every_row_whose_source_is_not_a_vendor_document_is_marked_secondary(row) -> None:
    assert row.secondary == bool(THIRD_PARTY.search(row.source)), row.card


def test_mfu_above_100_percent_on_a_geforce_card_is_explained_in_the_derivation_it_shows():
    from trainmeter.compute.mfu import mfu

    for name in ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5070", "NVIDIA GeForce RTX 3070 Ti"):
        peak = peak_flops(name)
        d = mfu(2e12, 100.0, 1, peak)  # 2e14 FLOP/s: above the card's figure
        assert d.value > 1
        source = next(i.source for i in d.inputs if i.name == "peak")
        assert "boost above the clock the peak is quoted at" in source and "above 100%" in source


@pytest.mark.parametrize(
    ("name", "card", "bf16", "fp16"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5, 989.5),
        ("NVIDIA B300 SXM6 AC", "B300", 2250.0, 2250.0),
        ("NVIDIA GB300", "GB300", 2500.0, 2500.0),
        ("AMD Instinct MI300X", "MI300X", 1307.4, 1307.4),
        ("AMD Instinct MI355X", "MI355X", 2516.6, 2516.6),
        ("AMD Instinct MI350X", "MI350X", 2306.9, 2306.9),
        ("AMD Instinct MI300A", "MI300A", 980.6, 980.6),
        ("AMD Instinct MI250X", "MI250X (one GCD)", 191.5, 191.5),
        ("NVIDIA L40", "L40", 181.05, 181.05),
        ("NVIDIA A40", "A40", 149.7, 149.7),
        ("NVIDIA RTX A6000", "RTX A6000", 154.8, 154.8),
        ("NVIDIA GeForce RTX 4080", "GeForce RTX 4080", 97.5, 97.5),
        ("NVIDIA GeForce RTX 5080", "GeForce RTX 5080", 112.6, None),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Workstation", 503.8, None),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Max-Q", 438.9, None),
        ("Tesla P100-PCIE-16GB", "P100 PCIe", None, 18.7),
        ("NVIDIA H20", "H20", 148.0, 148.0),
        ("NVIDIA GeForce RTX 5070", "GeForce RTX 5070", 61.7, None),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell Server", 467.8, None),
    ],
)
def test_new_cards_give_their_cited_dense_peak(name: str, card: str, bf16: float | None, fp16: float | None) -> None:
    for dtype, want in (("bf16", bf16), ("fp16", fp16)):
        row = peak_flops(name, dtype)
        assert (row.tflops if row else None) == want, dtype
        if row is not None:
            assert row.card == card and row.provenance == "detected"


def test_gb300_is_not_taken_for_b300_nor_gb200_for_b200() -> None:
    assert match_card("NVIDIA GB300") == "GB300"
    assert match_card("NVIDIA B300 SXM6 AC") == "B300"
    assert match_card("NVIDIA GB200") == "GB200"


def test_rtx_pro_6000_variants_differ_and_the_server_edition_has_nvidias_dense_figure_at_its_clock() -> None:
    assert peak_flops("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition").tflops == 438.9
    assert peak_flops("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").tflops == 503.8
    server = peak_flops("NVIDIA RTX PRO 6000 Blackwell Server Edition", "fp8")
    assert server.tflops == 935.6 and "scaled to 2430 MHz" in server.source and "sparse" in server.source


def test_an_ambiguous_name_is_settled_by_pci_device_id_or_memory_size() -> None:
    assert peak_flops("NVIDIA H100") is None
    by_pci = peak_flops("NVIDIA H100", pci_device_id=(0x2330 << 16) | 0x10DE)
    assert by_pci is not None and by_pci.card == "H100 SXM"
    assert peak_flops("NVIDIA H100", pci_device_id=0x2331).card == "H100 PCIe"
    assert peak_flops("NVIDIA H100", pci_device_id=0x2321).card == "H100 NVL"
    assert peak_flops("NVIDIA H100", pci_device_id=0x2339) is None  # NVIDIA's own "NVIDIA H100": no variant
    by_mem = peak_flops("NVIDIA H100", memory_bytes=95830 * MIB)
    assert by_mem is not None and by_mem.card == "H100 NVL"
    assert peak_flops("NVIDIA H100", memory_bytes=81559 * MIB) is None
    assert "SXM, PCIe or NVL" in why_no_peak("NVIDIA H100", memory_bytes=81559 * MIB)


def test_h100_nvl_memory_as_nvml_reports_it_settles_the_name():
    # NVML reads H100 NVL's 94 GB as 95830 MiB (100.5e9 bytes): a range in decimal GB missed it
    assert match_card("NVIDIA H100", memory_bytes=95830 * MIB) == "H100 NVL"
    assert match_card("NVIDIA H100", memory_bytes=97871 * MIB) == "H100 NVL"


def _identity(name="NVIDIA H100", pci_device_id=None, mem_total_bytes=None):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, pci_device_id=pci_device_id, mem_total_bytes=mem_total_bytes)


def _peak_with(identity, memory_bytes=None):
    """``peak_for_run`` of an "NVIDIA H100" whose identity the GPU wing read (NVML opened)."""
    from types import SimpleNamespace

    gpu = SimpleNamespace(device_identity=lambda uuid: identity, opening=lambda: False)
    return peak_for_run("NVIDIA H100", "bf16", memory_bytes, "GPU-0", gpu=gpu)[:2]


def test_peak_for_run_settles_a_family_name_by_the_pci_id_nvml_read():
    peak, why = _peak_with(_identity(pci_device_id=0x2330))
    assert peak is not None and peak.card == "H100 SXM" and peak.tflops == 989.5 and why is None


def test_peak_for_run_without_id_or_memory_names_the_variants():
    for identity in (None, _identity()):
        peak, why = _peak_with(identity)
        assert peak is None and "H100 SXM, PCIe or NVL" in why and "--peak-tflops X --peak-source TEXT" in why


def test_peak_for_run_uses_nvml_memory_and_its_name_when_torch_says_less():
    peak, _ = _peak_with(_identity(mem_total_bytes=95830 * MIB))
    assert peak.card == "H100 NVL"
    peak, _ = _peak_with(_identity(name="NVIDIA H100 PCIe"))
    assert peak.card == "H100 PCIe"


def test_peak_for_run_waits_only_while_nvml_opens_and_explains_cpu_and_dtype():
    from types import SimpleNamespace

    opening = SimpleNamespace(device_identity=lambda uuid: None, opening=lambda: True)
    opened = SimpleNamespace(device_identity=lambda uuid: None, opening=lambda: False)
    assert peak_for_run("NVIDIA H100", "bf16", gpu=opening)[2] is True
    assert peak_for_run("NVIDIA H100", "bf16", gpu=opened)[2] is False
    assert peak_for_run("NVIDIA H100 80GB HBM3", "bf16", gpu=opening)[0].card == "H100 SXM"
    assert "on the CPU" in peak_for_run(None, "bf16")[1]
    assert "dtype torch.int8 has no tensor-core peak" in peak_for_run("NVIDIA H100", None, None, None,
                                                                      "torch.int8")[1]


def test_rocm_mi250x_slash_mi250_name_is_ambiguous() -> None:
    assert peak_flops("AMD Instinct MI250X/MI250") is None
    assert "MI250X or MI250" in why_no_peak("AMD Instinct MI250X/MI250")


def test_a_missing_dtype_names_the_rows_source() -> None:
    reason = why_no_peak("AMD Instinct MI355X", "tf32")
    assert "MI355X has no dense tf32" in reason and "CDNA 4 moved TF32 out of hardware" in reason


def test_cards_left_out_are_listed_with_a_reason() -> None:
    left = dict(LEFT_OUT)
    for card in ("GeForce RTX 5070 Ti", "GeForce RTX 4070 Ti, 4070", "RTX A5000, RTX A4500, RTX A4000",
                 "RTX 4000 Ada, RTX 2000 Ada", "L20", "H800 NVL (H800 PCIe 94 GB)"):
        assert left[card]
    for name in ("NVIDIA GeForce RTX 5070 Ti", "NVIDIA GeForce RTX 4070 Ti", "NVIDIA GeForce RTX 4070",
                 "NVIDIA RTX A5000", "NVIDIA RTX A4500", "NVIDIA RTX A4000", "NVIDIA RTX 4000 Ada Generation",
                 "NVIDIA RTX 2000 Ada Generation", "NVIDIA L20", "NVIDIA H800 NVL"):
        assert peak_flops(name) is None


def test_newly_sourced_cells_give_their_dense_peak() -> None:
    assert peak_flops("NVIDIA A30", "bf16").tflops == 165.0 and peak_flops("NVIDIA A30", "tf32").tflops == 82.0
    assert peak_flops("NVIDIA A30", "fp8") is None  # Ampere: no FP8
    assert peak_flops("NVIDIA RTX 6000 Ada Generation", "fp8").tflops == 728.5
    assert peak_flops("NVIDIA RTX 6000 Ada Generation", "bf16").tflops == 364.0
    assert "RTX 6000 Ada has no dense fp16" in why_no_peak("NVIDIA RTX 6000 Ada Generation", "fp16")
    assert peak_flops("NVIDIA GeForce RTX 5090", "fp8").tflops == 419.0
    assert peak_flops("NVIDIA B300 SXM6 AC", "fp8").tflops == 4500.0
    assert peak_flops("NVIDIA B300 SXM6 AC", "tf32").tflops == 1125.0
    assert peak_flops("NVIDIA GB300", "fp8").tflops == 5000.0
    assert peak_flops("NVIDIA GB300", "tf32").tflops == 1250.0  # the NVL72 rack's 180 PFLOPS sparse / 72 / 2
    assert peak_flops("NVIDIA H800 80GB HBM3", "fp8").tflops == 1979.0
    assert peak_flops("NVIDIA H800", pci_device_id=0x2324).card == "H800 SXM"
    assert peak_flops("AMD Instinct MI355X", "fp8").tflops == 5033.2
    assert peak_flops("AMD Instinct MI350X", "fp8").tflops == 4613.7
    assert peak_flops("NVIDIA B200", "tf32").tflops == 1125.0  # HGX B200: 18 PFLOPS sparse / 8 GPUs / 2
    assert peak_flops("NVIDIA H20", "fp8").tflops == 294.0
    assert peak_flops("AMD Instinct MI300A", "tf32").tflops == 490.3
    assert peak_flops("NVIDIA H800").card == "H800 SXM"  # the plain NVML name: PCIe and NVL say so


def test_geforce_4080_5080_and_a6000_tf32_give_the_whitepapers_dense_figures() -> None:
    assert peak_flops("NVIDIA GeForce RTX 4080", "tf32").tflops == 48.7
    assert peak_flops("NVIDIA GeForce RTX 4080", "fp8").tflops == 194.9  # FP32 accumulate, not the FP16-acc 389.9
    assert "FP32 accumulate" in peak_flops("NVIDIA GeForce RTX 4080").source
    assert peak_flops("NVIDIA GeForce RTX 5080", "bf16").tflops == 112.6
    assert "GeForce RTX 5080 has no dense fp16" in why_no_peak("NVIDIA GeForce RTX 5080", "fp16")
    assert peak_flops("NVIDIA RTX A6000", "tf32").tflops == 77.4
    assert peak_flops("NVIDIA RTX A6000", "fp8") is None  # Ampere: no FP8


@pytest.mark.parametrize(
    ("name", "card"),
    [
        ("NVIDIA GeForce RTX 4080", "GeForce RTX 4080"),
        ("NVIDIA GeForce RTX 4080 SUPER", None),
        ("NVIDIA GeForce RTX 4080 Laptop GPU", None),
        ("NVIDIA GeForce RTX 5080", "GeForce RTX 5080"),
        ("NVIDIA GeForce RTX 5080 Laptop GPU", None),
        ("NVIDIA GeForce RTX 5070 Ti", None),
        ("NVIDIA GeForce RTX 5070", "GeForce RTX 5070"),
        ("NVIDIA GeForce RTX 5070 Laptop GPU", None),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", None),
        ("NVIDIA GeForce RTX 4090 D", None),
    ],
)
def test_a_card_name_that_extends_another_matches_only_its_own_row(name: str, card: str | None) -> None:
    assert _rows_matching(name) == ([card] if card else [])
    assert match_card(name) == card


def test_h800_pcie_and_h800_sxm_tf32_are_the_halved_starred_figures_the_report_reads_as_dense() -> None:
    row = peak_flops("NVIDIA H800 PCIe", "bf16")
    assert row.card == "H800 PCIe" and row.tflops == 756.5 and row.source.startswith("secondary:")
    assert peak_flops("NVIDIA H800 PCIe", "tf32").tflops == 378.0
    assert peak_flops("NVIDIA H800 PCIe", "fp8").tflops == 1513.0
    assert peak_flops("NVIDIA H800 80GB HBM3", "tf32").tflops == 494.5
    assert peak_flops("NVIDIA H800 NVL") is None  # the 94 GB part: no figure found
    assert match_card("NVIDIA H800 NVL") is None and match_card("NVIDIA H800 PCIe") == "H800 PCIe"


def test_a_variant_the_table_lacks_is_not_called_ambiguous() -> None:
    for name in ("NVIDIA H800 NVL",):
        reason = why_no_peak(name)
        assert "no datasheet peak for" in reason and "does not say which variant" not in reason


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
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GeForce RTX 4080 SUPER",  # not the RTX 4080 row: a different card
        "NVIDIA GeForce RTX 4080 Laptop GPU",
        "NVIDIA GeForce RTX 5080 Laptop GPU",
        "NVIDIA GeForce RTX 5070 Ti",  # not the RTX 5070 row, nor RTX 5080
        "NVIDIA GeForce RTX 4070 Ti",
        "NVIDIA GeForce RTX 4070",
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


def test_a10g_row_says_its_figure_is_approximate() -> None:
    row = peak_flops("NVIDIA A10G")
    assert row is not None and "approximate" in row.source
    assert peak_flops("NVIDIA A10G", "tf32") is None


def test_docs_peaks_lists_every_row_with_its_source_and_every_card_left_out():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "peaks.md").read_text()
    assert text == peaks_markdown()
    for row in TABLE:
        assert f"| {row.card} |" in text and row.source in text, row.card
    for card, why in LEFT_OUT:
        assert f"**{card}**: {why}." in text


def test_a_peak_row_round_trips_through_the_passport():
    from trainmeter.compute.peaks import PeakRow

    row = PeakRow(card="H100 SXM", dtype="bf16", tflops=989.0, source="datasheet", provenance="declared")
    assert PeakRow.from_dict(row.to_dict()) == row
    assert list(row.to_dict()) == ["tflops", "card", "dtype", "source", "provenance"]
    assert PeakRow.from_dict(None) is None and PeakRow.from_dict({"tflops": -1}) is None


_DOC_HEAD = """# Dense peaks: the table and its sources

Generated from `trainmeter.compute.peaks` (its rows: `compute/peak_table.json`) by `peaks_markdown()` in tests/compute/test_peaks.py, which checks the
two agree (regenerate with `python -m tests.compute.test_peaks`). The table MFU divides by (docs/spec.md section 5), TFLOP/s per
device, **dense**. Each row keeps the figures as its source quotes them; where the source quotes only 2:4-sparse
figures ("with sparsity") the dense peak is that / 2, and no sparse figure is ever divided by. "-": the card's
tensor cores lack the dtype, or no source found gives it (the source column says which). A row is *secondary*
(its source starts so) wherever a figure comes from a page other than the vendor's own document (a reseller's or a
public note's copy of it, a press copy); tests/compute/test_peaks.py checks every such row is marked. Caveats kept
from the sources: Blackwell datasheets quote the peak at a clock below the deployed boost (MFU against it can read a
little high); GeForce rows are the rate with FP32 accumulate (PyTorch's bf16/fp16 GEMMs), half the FP16-accumulate
headline, and GeForce cards boost above the clock that rate is quoted at, so MFU can read above 100% (the peak's
source, shown in the MFU derivation, says so); MI250/MI250X are per GCD, since ROCm shows each GCD as a device; P100
has no tensor cores and its FP16 figure is the packed-FP16 rate. `tm.calibrate()` measures the achievable ceiling on
the device itself. The table is for CUDA and ROCm devices (NVIDIA and AMD GPUs): a TPU (torch_xla) or another
accelerator has no row, so no MFU unless its peak is declared with `--peak-tflops X --peak-source TEXT`.
"""


def peaks_markdown() -> str:
    """docs/peaks.md: the matching rules, every row with its dense peaks and source, and the cards left out."""
    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    lines = [_DOC_HEAD, "Matching: the NVML / torch name (CUDA or ROCm), lower-cased, most specific row first, each "
             "real name matching exactly one row. A name that says only its family gets no peak unless the PCI "
             "device id or the memory size settles it: "
             + ", ".join(f"PCI 0x{k:04x} -> {v}" for k, v in BY_PCI_DEVICE_ID.items()) + "; "
             + ", ".join(f"`{p}` with {lo:g}-{hi:g} GiB -> {c}" for p, lo, hi, c in BY_MEMORY_GIB)
             + ". Ambiguous without them: " + "; ".join(v for _, v in AMBIGUOUS) + ".", "",
             "A share of a card (docs/spec.md section 5): a device that reads fewer SMs than its card (torch's "
             "`multi_processor_count`: a MIG instance, an AMD compute partition) divides by the card's dense peak x "
             "its SMs / the card's (the SMs column), labelled so in the peak's card and source (`A100 SXM4 40GB, MIG "
             "3g.20gb (42 of the card's 108 SMs)`). A MIG instance's name (its suffix matching "
             f"`{MIG_NAME}`) is matched by the card's part; it gets no peak where its SM count or the card's is not "
             f"known. A vGPU profile's name (`{VGPU_NAME}`: `NVIDIA A10-4Q`, `GRID A100-40C`) gets no peak: the share "
             f"of the card it is given cannot be read inside the VM. SM counts: {SM_SOURCES}.", "",
             "| card | BF16 | FP16 | TF32 | FP8 | SMs (CUs) | source |", "|---|---|---|---|---|---|---|"]
    for r in TABLE:
        p = r.peaks
        lines.append(f"| {r.card} | {cell(p['bf16'])} | {cell(p['fp16'])} | {cell(p['tf32'])} | {cell(p['fp8'])} "
                     f"| {cell(r.sms)} | {r.source} |")
    lines += ["", "## Cards left out", "",
              "No peak, so no MFU unless declared with `--peak-tflops X --peak-source TEXT` (or measured with "
              "`tm.calibrate()`):", ""]
    lines += [f"- **{card}**: {why}." for card, why in LEFT_OUT]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # regenerate docs/peaks.md
    from pathlib import Path

    (Path(__file__).resolve().parents[2] / "docs" / "peaks.md").write_text(peaks_markdown())
