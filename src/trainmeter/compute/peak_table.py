"""The rows of the dense-peak table: one per card, its name pattern, the figures as its source quotes them, the source.

The dense peak is derived (quoted / 2 for a 2:4-sparse figure); rows are tried in order, most specific first
(docs/peaks.md). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CardRow:
    """One card: its short name (``"H100 SXM"``), a regex searched in the normalized device name (``exclude``: one that
    rules the row out), TFLOP/s per dtype as the ``source`` quotes them (``sparse_quoted``: 2:4-sparse, dense = / 2)
    and ``secondary``: a page other than the vendor's is cited."""

    card: str
    pattern: str
    exclude: str | None
    quoted: dict[str, float | None]
    sparse_quoted: bool
    source: str
    secondary: bool = False

    @property
    def peaks(self) -> dict[str, float | None]:
        """Dense TFLOP/s per dtype: the quoted figure, halved when the source quotes it with sparsity."""
        div = 2.0 if self.sparse_quoted else 1.0
        return {k: (None if v is None else v / div) for k, v in self.quoted.items()}


def _q(bf16: float | None, fp16: float | None, tf32: float | None, fp8: float | None) -> dict[str, float | None]:
    return {"bf16": bf16, "fp16": fp16, "tf32": tf32, "fp8": fp8}


def _row(card: str, pattern: str, quoted: dict[str, float | None], source: str, *, sparse: bool,
         exclude: str | None = None, secondary: bool = False) -> CardRow:
    return CardRow(card=card, pattern=pattern, exclude=exclude, quoted=quoted, sparse_quoted=sparse,
                   source=source, secondary=secondary)


_SP = "quoted with sparsity; dense = quoted / 2"
_D = "dense, quoted directly"
_BW = ("Blackwell datasheets quote the peak at a clock below the boost the deployed part runs at, so MFU "
       "against it can read a little high")
_GEFORCE = ("GeForce: the rate with FP32 accumulate (what PyTorch's bf16/fp16 GEMMs run at), half the "
            "FP16-accumulate headline")
_H100_SXM_Q = _q(1979.0, 1979.0, 989.0, 3958.0)
_H100_NVL_Q = _q(1671.0, 1671.0, 835.0, 3341.0)
_A100_Q = _q(312.0, 312.0, 156.0, None)
_A100_VARIANTS = (r"\ba100\b.*\bsxm4?\b.*\b80gb\b", r"\ba100\b.*\bsxm4?\b.*\b40gb\b", r"\ba100\b.*\bpcie\b.*\b40gb\b",
                  r"\ba100\b.*\b80gb\b.*\bpcie\b")
_A100_SRC = f"NVIDIA A100 datasheet: 312 BF16/FP16, 156 TF32, {_D}; Ampere has no FP8"
_MI300_Q = _q(1307.4, 1307.4, 653.7, 2614.9)

TABLE: tuple[CardRow, ...] = (
    # -- NVIDIA Blackwell datacenter: GB300 before B300, GB200 before B200 --------------------------------------
    _row("GB300", r"\bgb300\b", _q(5000.0, 5000.0, 2500.0, 10000.0),
         f"NVIDIA GB300 NVL72 page: 360 PFLOPS FP16/BF16 with sparsity over 72 GPUs = 5000 per GPU, {_SP}; FP8: "
         f"NVIDIA's GB300 NVL72 specifications as reproduced by vendordeep.com, 720 PFLOPS FP8/FP6 over 72 GPUs = "
         f"10000 per GPU, the sparse figure (verda.com's per-GPU table gives 5 PFLOPS FP8 dense); NVIDIA's Exemplar "
         f"Performance README (github.com/NVIDIA/exemplar-performance, 'Peak Theoretical Throughput', non-sparse) "
         f"gives 2450 BF16 and 4900 FP8 for GB300, 2% below these; TF32: the GB300 NVL72 page's rack figure as a "
         f"public NVIDIA spec report tabulates it, 180 PFLOPS with sparsity (90 dense) over 72 GPUs = 2500 per GPU; "
         f"{_BW}",
         sparse=True),
    _row("GB200", r"\bgb200\b", _q(5000.0, 5000.0, 2500.0, 10000.0),
         f"NVIDIA GB200 NVL72 page, per-GPU column: 5000 BF16/FP16, 2500 TF32, 10000 FP8, {_SP}; {_BW}",
         sparse=True),
    _row("B300", r"(?<![a-z0-9])b300\b", _q(4500.0, 4500.0, 2250.0, 9000.0),
         f"NVIDIA HGX B300 datasheet: 36 PFLOPS FP16/BF16 with sparsity over 8 GPUs = 4500 per GPU; TF32 and FP8 "
         f"from NVIDIA's HGX B300 specification table as reproduced by fibermall.com: 18 PFLOPS TF32 and 72 PFLOPS "
         f"FP8/FP6, starred 'with sparsity', over 8 GPUs = 2250 and 9000 per GPU, {_SP}; NVIDIA's Exemplar "
         f"Performance README ('Peak Theoretical Throughput', non-sparse) gives the same 2250 BF16 and 4500 FP8 for "
         f"B300; {_BW}", sparse=True),
    _row("B200", r"(?<![a-z0-9])b200\b", _q(4500.0, 4500.0, 2200.0, 9000.0),
         f"NVIDIA HGX/DGX B200 pages: 4500 BF16/FP16, 2200 TF32, 9000 FP8, {_SP}; {_BW}", sparse=True),
    _row("B100", r"(?<![a-z0-9])b100\b", _q(3500.0, 3500.0, 1750.0, 7000.0),
         f"NVIDIA Blackwell launch datasheet (HGX B100 / 8): 3500 BF16/FP16, 1750 TF32, 7000 FP8, {_SP}; {_BW}",
         sparse=True),
    # -- NVIDIA Hopper -------------------------------------------------------------------------------------------
    _row("GH200", r"\bgh200\b", _H100_SXM_Q,
         f"NVIDIA GH200 page: 1979 BF16/FP16, 989 TF32, 3958 FP8 (H100 SXM compute), {_SP}", sparse=True),
    _row("H200 NVL", r"(?<![a-z0-9])h200\b.*\bnvl\b", _H100_NVL_Q,
         f"NVIDIA H200 page, H200 NVL: 1671 BF16/FP16, 835 TF32, 3341 FP8, {_SP}", sparse=True),
    _row("H200 SXM", r"(?<![a-z0-9])h200\b", _H100_SXM_Q,
         f"NVIDIA H200 page, H200 SXM: 1979 BF16/FP16, 989 TF32, 3958 FP8, {_SP}", sparse=True, exclude=r"\bnvl\b"),
    _row("H100 NVL", r"(?<![a-z0-9])h100\b.*\bnvl\b", _H100_NVL_Q,
         f"NVIDIA H100 page, H100 NVL per GPU: 1671 BF16/FP16, 835 TF32, 3341 FP8, {_SP} (the 2023 datasheet "
         f"quoted the 2-GPU pair)", sparse=True),
    _row("H100 PCIe", r"(?<![a-z0-9])h100\b.*\bpcie\b", _q(1513.0, 1513.0, 756.0, 3026.0),
         f"NVIDIA H100 datasheet, H100 PCIe: 1513 BF16/FP16, 756 TF32, 3026 FP8, {_SP}", sparse=True),
    _row("H100 SXM", r"(?<![a-z0-9])h100\b.*\b(sxm|hbm3)", _H100_SXM_Q,
         f"NVIDIA H100 datasheet, H100 SXM: 1979 BF16/FP16, 989 TF32, 3958 FP8, {_SP}", sparse=True),
    _row("H800 SXM", r"(?<![a-z0-9])h800\b.*\b(sxm|hbm3)", _q(1979.0, 1979.0, 989.0, 3958.0),
         f"secondary: no public NVIDIA H800 datasheet in the sources found; a DeepSeek maintainer "
         f"(github.com/deepseek-ai/FlashMLA/issues/75) gives 1979 BF16/FP16 sparse, 989 dense for H800 SXM5; the "
         f"table of github.com/astroC86/gpu-datasheet (from the H800 datasheet copy at chaoqing-i.com) gives the "
         f"same 1979 BF16/FP16 beside 3958 FP8, the same (sparse) column; TF32: a public H800/H20 spec report "
         f"quotes a reseller's copy of NVIDIA's H800 SXM5 table, TF32 989 starred as sparse, 494 dense; {_SP}",
         sparse=True, secondary=True),
    _row("H800 PCIe", r"(?<![a-z0-9])h800\b.*\bpcie\b", _q(1513.0, 1513.0, 756.0, 3026.0),
         f"secondary: no public NVIDIA H800 datasheet in the sources found; a public H800/H20 spec report quotes "
         f"NVIDIA's H800 PCIe table as reprinted in full by the reseller AFOX: 1513 BF16/FP16, 756 TF32, 3026 FP8, "
         f"each starred; the reprint lost the footnote, and the report reads the stars as sparsity (NVIDIA's "
         f"convention; the figures equal the H100 PCIe datasheet's sparse ones) and gives 756 / 378 / 1513 dense; "
         f"a second public report gives the same ~756 / ~378 / ~1513 dense after Lenovo's ThinkSystem page; "
         f"{_SP}", sparse=True, secondary=True),
    _row("H20", r"(?<![a-z0-9])h20\b", _q(148.0, 148.0, 74.0, None),
         "secondary: no NVIDIA H20 datasheet in the sources found; press copies of its spec (zangshuxian.com, "
         "willitrunai.com) give 148 FP16 dense, 74 TF32; BF16 at the FP16 rate as on every Hopper part; "
         "FP8 not given", sparse=False, secondary=True),
    # -- NVIDIA Ada / Ampere / Pascal / Volta / Turing datacenter --------------------------------------------------
    _row("L40S", r"\bl40s\b", _q(362.05, 362.05, 183.0, 733.0),
         f"NVIDIA L40S datasheet: 362 BF16/FP16, 183 TF32, 733 FP8, {_D} (sparse figures double)", sparse=False),
    _row("L40", r"\bl40\b", _q(181.05, 181.05, 90.5, 362.0),
         f"NVIDIA L40 datasheet (L40/L40S table): 181.05 BF16/FP16, 90.5 TF32, 362 FP8, {_D} (starred figures "
         f"are with sparsity)", sparse=False),
    _row("L4", r"\bl4\b", _q(242.0, 242.0, 120.0, 485.0),
         f"NVIDIA L4 datasheet: 242 BF16/FP16, 120 TF32, 485 FP8, {_SP}", sparse=True),
    _row("A800", r"\ba800\b", _q(312.0, 312.0, 156.0, None),
         "secondary: no NVIDIA A800 datasheet in the sources found; hmc-tech.com's spec table gives 311.87 "
         "BF16/FP16 tensor and 155.94 TF32 dense, the A100's 312 / 156 (A800 is A100 silicon with capped NVLink); "
         "no FP8", sparse=False, secondary=True),
    _row("A100 SXM4 80GB", _A100_VARIANTS[0], _A100_Q, _A100_SRC, sparse=False),
    _row("A100 SXM4 40GB", _A100_VARIANTS[1], _A100_Q, _A100_SRC, sparse=False),
    _row("A100 PCIe 40GB", _A100_VARIANTS[2], _A100_Q, _A100_SRC, sparse=False),
    _row("A100 PCIe 80GB", _A100_VARIANTS[3], _A100_Q, _A100_SRC, sparse=False),
    _row("A100", r"\ba100\b", _A100_Q, _A100_SRC + "; variant not recognised, all A100 variants share these",
         sparse=False, exclude="|".join(_A100_VARIANTS)),
    _row("A40", r"\ba40\b", _q(149.7, 149.7, 74.8, None),
         f"NVIDIA A40 datasheet: 149.7 BF16 (FP32 accumulate) and FP16, 74.8 TF32, {_D} (starred figures are "
         f"with sparsity); no FP8", sparse=False),
    _row("A30", r"\ba30\b", _q(165.0, 165.0, 82.0, None),
         f"NVIDIA A30 datasheet (as transcribed, with its URL, in facebookresearch/xformers "
         f"xformers/profiler/device_limits.py): 165 BF16/FP16, 82 TF32, {_D} (the datasheet's starred figures "
         f"are with sparsity); Ampere has no FP8", sparse=False),
    _row("A16 (one GPU)", r"\ba16\b", _q(None, 17.9, 9.0, None),
         f"NVIDIA A16 datasheet (as reproduced by panchaea.com), per GPU of the four on the board: 17.9 FP16 "
         f"tensor, 9 TF32, {_D} (35.9 / 18 with sparsity); BF16 not listed there; no FP8", sparse=False),
    _row("A2", r"\ba2\b", _q(18.13, 18.13, 9.06, None),
         f"secondary: no NVIDIA A2 figure in the sources found; hmc-tech.com's spec table gives 18.13 BF16 and "
         f"FP16 tensor (FP32 accumulate), 9.06 TF32, {_D}; no FP8", sparse=False, secondary=True),
    _row("A10G", r"\ba10g\b", _q(70.0, 70.0, None, None),
         "secondary: no NVIDIA datasheet (AWS-only SKU); ~70 BF16/FP16 tensor per Baseten 'A10 vs A10G' and the "
         "nanochat table, approximate; TF32 not published; no FP8", sparse=False, secondary=True),
    _row("A10", r"\ba10\b", _q(250.0, 250.0, 125.0, None),
         f"NVIDIA A10 datasheet: 250 BF16/FP16, 125 TF32, {_SP}; no FP8", sparse=True),
    _row("T4", r"\bt4\b", _q(None, 65.0, None, None),
         "NVIDIA T4 datasheet: 65 FP16/FP32 mixed, dense; Turing has no BF16, TF32 or FP8", sparse=False),
    _row("V100S PCIe", r"\bv100s\b", _q(None, 130.0, None, None),
         "NVIDIA V100 datasheet: V100S 130 FP16 tensor, dense; Volta has no BF16, TF32 or FP8", sparse=False),
    _row("V100 PCIe", r"\bv100\b.*\bpcie\b", _q(None, 112.0, None, None),
         "NVIDIA V100 datasheet: PCIe 112 FP16 tensor, dense; Volta has no BF16, TF32 or FP8", sparse=False),
    _row("V100 SXM2", r"\bv100\b.*\bsxm2?\b", _q(None, 125.0, None, None),
         "NVIDIA V100 datasheet: SXM2 125 FP16 tensor, dense; Volta has no BF16, TF32 or FP8", sparse=False),
    _row("P100 PCIe", r"\bp100\b.*\bpcie\b", _q(None, 18.7, None, None),
         "NVIDIA Tesla P100 specifications (as reproduced by tech4gamers.com): PCIe 18.7 half precision; Pascal "
         "has no tensor cores, no BF16/TF32/FP8; a GEMM accumulating in FP32 runs at the 9.3 FP32 rate, so MFU "
         "against this figure can read half of what the card allows (tm.calibrate() measures it)", sparse=False),
    _row("P100 SXM2", r"\bp100\b.*\bsxm2?\b", _q(None, 21.2, None, None),
         "NVIDIA Tesla P100 specifications (as reproduced by tech4gamers.com): SXM2 21.2 half precision; Pascal "
         "has no tensor cores, no BF16/TF32/FP8; a GEMM accumulating in FP32 runs at the 10.6 FP32 rate, so MFU "
         "against this figure can read half of what the card allows (tm.calibrate() measures it)", sparse=False),
    # -- NVIDIA workstation --------------------------------------------------------------------------------------
    _row("RTX PRO 6000 Blackwell Max-Q", r"\brtx pro 6000\b.*\bmax-?q\b", _q(438.9, None, None, None),
         f"NVIDIA RTX Blackwell PRO GPU Architecture whitepaper v1.1, Table 4: 438.9 BF16 tensor, {_D}; other "
         f"dtypes not in the sources found; {_BW}", sparse=False),
    _row("RTX PRO 6000 Blackwell Workstation", r"\brtx pro 6000\b.*\bworkstation\b", _q(503.8, None, None, None),
         f"NVIDIA RTX Blackwell PRO GPU Architecture whitepaper v1.1, Table 4: 503.8 BF16 tensor, {_D}; other "
         f"dtypes not in the sources found; {_BW}", sparse=False, exclude=r"\bmax-?q\b"),
    _row("RTX 6000 Ada", r"\brtx 6000 ada\b", _q(728.0, None, None, 1457.0),
         f"NVIDIA RTX 6000 Ada Generation datasheet (as reproduced in github.com/atineoSE/coding-model-seeks-gpu): "
         f"'Tensor performance 1457.0 TFLOPS', footnote 'Effective FP8 TFLOPS using the new sparsity feature'; BF16 "
         f"from NVIDIA's RTX Blackwell PRO GPU Architecture whitepaper v1.0, Table 4, as a public hardware note "
         f"quotes it: 364 dense BF16 with FP32 accumulate, 728 with sparsity; {_SP}; FP16 and TF32 not in the "
         f"sources found", sparse=True),
    _row("RTX A6000", r"\brtx a6000\b", _q(154.8, 154.8, 77.4, None),
         f"NVIDIA Ampere GA102 GPU Architecture whitepaper v2 (its RTX A6000 appendix), as public code and a paper "
         f"quote it with its URL: 154.8 'Peak BF16 Tensor TFLOPS with FP32 Accumulate' and 77.4 'Peak TF32 Tensor "
         f"TFLOPS', without sparsity, {_D}; FP16 154.8 dense per Microway's Ampere comparison; the RTX A6000 "
         f"datasheet's 309.7 tensor TFLOPS is the sparse figure, twice these; no FP8", sparse=False),
    # -- NVIDIA GeForce ------------------------------------------------------------------------------------------
    _row("GeForce RTX 5090", r"\brtx 5090\b", _q(209.5, 209.5, 104.8, 419.0),
         f"NVIDIA RTX Blackwell whitepaper / spec copies: 209.5 BF16/FP16, 104.8 TF32, {_D}; FP8 with FP32 "
         f"accumulate 419 (838 with sparsity) from the whitepaper's Appendix A as two public notes quote it; "
         f"{_GEFORCE}", sparse=False, exclude=r"\b5090 ?d\b|laptop|mobile"),
    _row("GeForce RTX 5080", r"\brtx 5080\b", _q(112.6, None, None, None),
         f"NVIDIA RTX Blackwell GPU Architecture whitepaper, as a public MFU note's table quotes it (with the "
         f"whitepaper's URL): 112.6 BF16 tensor, {_D} (225.1 sparse/effective; the same table's RTX 5090 and 4090 "
         f"rows, 209.5 and 165.2, are the whitepaper's FP32-accumulate rates); FP16, TF32 and FP8 not in the "
         f"sources found; {_GEFORCE}", sparse=False, exclude=r"\b5080 super\b|laptop|mobile"),
    _row("GeForce RTX 4090", r"\brtx 4090\b", _q(165.2, 165.2, 82.6, 330.3),
         f"NVIDIA Ada whitepaper: 165.2 BF16/FP16 and 330.3 FP8, 82.6 TF32, {_D}; {_GEFORCE}", sparse=False,
         exclude=r"\b4090 ?d\b|laptop|mobile"),
    _row("GeForce RTX 4080", r"\brtx 4080\b", _q(97.5, 97.5, 48.7, 194.9),
         f"NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix B (RTX 4080), as a public research note quotes "
         f"it: 97.5 BF16 tensor with FP32 accumulate (194.9 with FP16 accumulate), 48.7 TF32, 194.9 FP8 with FP32 "
         f"accumulate, {_D} (a public MFU note's table from the RTX Blackwell whitepaper gives the same 97.5 dense "
         f"beside 195 sparse); FP16 with FP32 accumulate 97.5 as a public peak table gives it ('Ada, FP16 tensor, "
         f"dense, FP32 accumulate'); {_GEFORCE}", sparse=False, exclude=r"\b4080 super\b|laptop|mobile"),
    _row("GeForce RTX 3070 Ti", r"\brtx 3070 ti\b", _q(43.5, None, None, None),
         f"NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix B, Table 5: 43.5 BF16 tensor with FP32 "
         f"accumulate, {_D} (87 with sparsity); {_GEFORCE}; other dtypes not in the sources found", sparse=False,
         exclude=r"laptop|mobile"),
    _row("GeForce RTX 3090", r"\brtx 3090\b", _q(71.0, 71.0, 35.6, None),
         f"NVIDIA GA102 whitepaper: 71 BF16/FP16 (142 with FP16 accumulate), 35.6 TF32, {_D}; {_GEFORCE}; no FP8",
         sparse=False, exclude=r"\b3090 ?ti\b|laptop|mobile"),
    # -- AMD Instinct (torch.cuda.get_device_name() under ROCm) ---------------------------------------------------
    _row("MI355X", r"\bmi355x\b", _q(2500.0, 2500.0, None, 5000.0),
         f"AMD CDNA 4 architecture whitepaper, Table 2 (MI350 Series product offerings; text in "
         f"github.com/kuhar/amdgpu-isa-manuals cdna4/whitepaper.md): 2.5 PF FP16 and BF16 matrix (5.0 with "
         f"sparsity), 5.0 PF OCP-FP8 (10 with sparsity, Table 1), {_D}; CDNA 4 moved TF32 out of hardware (BF16 "
         f"software emulation, the whitepaper says), so no TF32 peak", sparse=False),
    _row("MI350X", r"\bmi350x\b", _q(2300.0, 2300.0, None, 4600.0),
         f"AMD CDNA 4 architecture whitepaper, Table 2 (MI350 Series product offerings): 2.3 PF FP16 and BF16 "
         f"matrix (4.6 with sparsity), 4.6 PF OCP-FP8, {_D}; CDNA 4 moved TF32 out of hardware (BF16 software "
         f"emulation), so no TF32 peak", sparse=False),
    _row("MI325X", r"\bmi325x\b", _MI300_Q,
         f"AMD Instinct MI325X datasheet: 1307.4 BF16/FP16, 653.7 TF32, 2614.9 FP8, {_D} (sparse figures double)",
         sparse=False),
    _row("MI300X", r"\bmi300x\b", _MI300_Q,
         f"AMD Instinct MI300X datasheet: 1307.4 BF16/FP16, 653.7 TF32, 2614.9 FP8, {_D} (sparse figures double)",
         sparse=False),
    _row("MI300A", r"\bmi300a\b", _q(980.6, 980.6, 490.3, 1961.2),
         f"AMD CDNA 3 architecture whitepaper, Table 2 (MI300 Series product offerings; text in "
         f"github.com/kuhar/amdgpu-isa-manuals cdna3/whitepaper.md): MI300A APU 980.6 BF16/FP16, 490.3 TF32, "
         f"1961.2 FP8, {_D} (sparse figures double)", sparse=False),
    _row("MI250X (one GCD)", r"\bmi250x\b", _q(191.5, 191.5, None, None),
         f"AMD Instinct MI250X page: 383 FP16/BF16 matrix per package, {_D}; ROCm shows each of its two GCDs as "
         f"one device, so 191.5 per device; CDNA 2 has no TF32 or FP8", sparse=False, exclude=r"\bmi250x ?/ ?mi250\b"),
    _row("MI250 (one GCD)", r"\bmi250\b", _q(181.0, 181.0, None, None),
         f"AMD Instinct MI250 page: 362 FP16/BF16 matrix per package, {_D}; ROCm shows each of its two GCDs as "
         f"one device, so 181 per device; CDNA 2 has no TF32 or FP8", sparse=False, exclude=r"\bmi250x\b"),
)
"""The table, most specific first: the first row whose pattern matches (and whose exclusion does not) wins."""

AMBIGUOUS: tuple[tuple[str, str], ...] = (
    (r"(?<![a-z0-9])h100\b", "H100 SXM, PCIe or NVL"),
    (r"(?<![a-z0-9])h800\b(?!.*\b(pcie|nvl)\b)", "H800 SXM, PCIe or NVL"),
    (r"\bv100\b", "V100 SXM2 or PCIe"),
    (r"\bp100\b", "P100 SXM2 or PCIe"),
    (r"\bmi250x ?/ ?mi250\b", "MI250X or MI250"),
)
"""Names that match a family but not a variant: no peak from the name alone, and the reason says so."""

BY_PCI_DEVICE_ID: dict[int, str] = {0x2330: "H100 SXM", 0x2331: "H100 PCIe", 0x2321: "H100 NVL", 0x2324: "H800 SXM"}
"""PCI device ids (``nvmlDeviceGetPciInfo().pciDeviceId >> 16``) that settle an ambiguous name, to the card; the
ids are NVIDIA's own (open-gpu-kernel-modules README, "Compatible GPUs": 2330 "NVIDIA H100 80GB HBM3", 2331
"NVIDIA H100 PCIe", 2321 "NVIDIA H100 NVL"; 2324 "NVIDIA H800" is its only H800 id not named PCIe (2322) or NVL
(233A), and an NCCL issue log shows H800 SXM5 devices named "NVIDIA H800"). Its 2339 "NVIDIA H100" says no
variant and settles nothing."""

BY_MEMORY_GIB: tuple[tuple[str, float, float, str], ...] = ((r"(?<![a-z0-9])h100\b", 88.0, 100.0, "H100 NVL"),)
"""(family pattern, lowest GiB, highest GiB, card): a memory size that settles an ambiguous name. H100 NVL (94 GB)
reads about 93.6 GiB in NVML (95830 MiB) and a little less in torch; the 80 GB parts read 79.6 GiB."""

LEFT_OUT: tuple[tuple[str, str], ...] = (
    ("RTX PRO 6000 Blackwell Server Edition", "the architecture whitepaper's Table 4 figures found cover the "
     "Workstation and Max-Q editions only; NVIDIA's Server Edition page advertises 'FP16 | BF16 Tensor Core: 1 "
     "PFLOP' and 'FP8: 2 PFLOPS', and its datasheet '4 PFLOPS' FP4 and 234 TF32, none saying dense or sparse (as "
     "public notes quote them); halving an unlabelled figure would be a guess"),
    ("GeForce RTX 5070 Ti, 5070", "the RTX Blackwell whitepaper's figures found (as public notes quote them) "
     "cover the RTX 5090 and 5080 only; the tables found for these cards are unsourced compilations that mix "
     "FP16- and FP32-accumulate rates, and NVIDIA publishes its own whitepaper"),
    ("GeForce RTX 4070 Ti, 4070", "the Ada whitepaper's appendix figures found (as public notes quote them) cover "
     "the RTX 4090 and 4080 only; the tables found for these cards are unsourced compilations that disagree with "
     "each other; a peak that is not sourced is not shown"),
    ("GeForce RTX 4080 SUPER, 4070 Ti SUPER, 4070 SUPER, 4090 D, laptop parts", "not in the sources found; they "
     "differ from the base cards"),
    ("H800 NVL (H800 PCIe 94 GB)", "no figure in the sources found (a public H800 report finds the SKU in "
     "NVIDIA's documentation but no authoritative performance figure for it)"),
)
"""Cards asked for that the table leaves out, and why (docs/spec.md section 5 lists them)."""
