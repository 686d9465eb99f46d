"""Datasheet peak DRAM bandwidth per GPU model, matched on the NVML product name (docs/spec.md section 8).

Figures are NVIDIA's datasheets' (decimal GB/s). Rules are tried in order, most specific first, on the lower-cased
name; a name matching nothing gets ``None`` (never a guess). Pure; thread-safe.
"""

from __future__ import annotations

import re

_GB = 1e9
_REF = "NVIDIA datasheet (nvml-gpm.md section 4)"

# (regex on the lower-cased NVML name, GB/s, model label)
_RULES: tuple[tuple[str, float, str], ...] = (
    (r"gh200.*144g", 4900, "GH200 144GB HBM3e"),
    (r"gh200", 4000, "GH200 96GB HBM3"),
    (r"gb200", 8000, "GB200"),
    (r"\bb200\b", 7700, "B200 (HGX)"),
    (r"\bb100\b", 8000, "B100"),
    (r"h200.*nvl", 4800, "H200 NVL"),
    (r"\bh200\b", 4800, "H200 SXM"),
    (r"h100.*nvl", 3900, "H100 NVL"),
    (r"h100.*pcie", 2000, "H100 PCIe"),
    (r"h100.*(hbm3|sxm)", 3350, "H100 SXM"),
    (r"a100.*pcie.*80gb|a100 80gb pcie", 1935, "A100 80GB PCIe"),
    (r"a100.*80gb", 2039, "A100 80GB SXM"),
    (r"a100.*40gb", 1555, "A100 40GB"),
    (r"\bl40s\b", 864, "L40S"),
    (r"\bl4\b", 300, "L4"),
    (r"\ba10g\b", 600, "A10G"),
    (r"\ba10\b", 600, "A10"),
    (r"\bt4\b", 320, "T4"),
    (r"v100s", 1134, "V100S PCIe"),
    (r"v100-sxm2", 900, "V100 SXM2"),
    (r"rtx 5090", 1792, "GeForce RTX 5090"),
    (r"rtx 4090", 1008, "GeForce RTX 4090"),
    (r"rtx 3090", 936, "GeForce RTX 3090"),
)


def peak_dram_bandwidth(name: str) -> tuple[float, str] | None:
    """``(bytes_per_s, source_text)`` for an NVML name (``"NVIDIA H100 80GB HBM3"``), or ``None`` (not in the table)."""
    key = name.lower().strip()
    for pattern, gb_per_s, label in _RULES:
        if re.search(pattern, key):
            return gb_per_s * _GB, f"{label}: {gb_per_s:g} GB/s, {_REF}"
    return None
