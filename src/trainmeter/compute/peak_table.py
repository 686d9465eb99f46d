"""The dense-peak table: one row per card, its name pattern, the figures as its source quotes them, the source.

The rows are data, in ``peak_table.json`` beside this module (docs/peaks.md is generated from them); the dense peak
is derived (quoted / 2 for a 2:4-sparse figure); rows are tried in order, most specific first. Pure; read once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CardRow:
    """One card: its short name (``"H100 SXM"``), a regex searched in the normalized device name (``exclude``: one that
    rules the row out), TFLOP/s per dtype as the ``source`` quotes them (``sparse_quoted``: 2:4-sparse, dense = / 2)
    and ``secondary``: a page other than the vendor's is cited; ``sms``: the whole card's SM count (CUs on AMD,
    ``sm_word``), or ``None`` where the table lacks it."""

    card: str
    pattern: str
    exclude: str | None
    quoted: dict[str, float | None]
    sparse_quoted: bool
    source: str
    secondary: bool = False
    sms: int | None = None
    sm_word: str = "SMs"

    @property
    def peaks(self) -> dict[str, float | None]:
        """Dense TFLOP/s per dtype: the quoted figure, halved when the source quotes it with sparsity."""
        div = 2.0 if self.sparse_quoted else 1.0
        return {k: (None if v is None else v / div) for k, v in self.quoted.items()}


_DATA = json.loads((Path(__file__).parent / "peak_table.json").read_text(encoding="utf-8"))

TABLE: tuple[CardRow, ...] = tuple(
    CardRow(card=r["card"], pattern=r["pattern"], exclude=r.get("exclude"), quoted=r["quoted"],
            sparse_quoted=r["sparse"], source=r["source"].format_map(_DATA["notes"]),
            secondary=r.get("secondary", False), sms=r.get("sms") or r.get("cus"),
            sm_word="CUs" if "cus" in r else "SMs")
    for r in _DATA["rows"])
"""The table, most specific first: the first row whose pattern matches (and whose exclusion does not) wins."""

AMBIGUOUS: tuple[tuple[str, str], ...] = tuple((pattern, text) for pattern, text in _DATA["ambiguous"])
"""Names that match a family but not a variant: no peak from the name alone, and the reason says so."""

BY_PCI_DEVICE_ID: dict[int, str] = {int(key, 16): card for key, card in _DATA["by_pci_device_id"].items()}
"""PCI device ids (``nvmlDeviceGetPciInfo().pciDeviceId >> 16``) that settle an ambiguous name, to the card; the
ids are NVIDIA's own (open-gpu-kernel-modules README, "Compatible GPUs": 2330 "NVIDIA H100 80GB HBM3", 2331
"NVIDIA H100 PCIe", 2321 "NVIDIA H100 NVL"; 2324 "NVIDIA H800" is its only H800 id not named PCIe (2322) or NVL
(233A), and an NCCL issue log shows H800 SXM5 devices named "NVIDIA H800"). Its 2339 "NVIDIA H100" says no
variant and settles nothing."""

BY_MEMORY_GIB: tuple[tuple[str, float, float, str], ...] = tuple(
    (pattern, low, high, card) for pattern, low, high, card in _DATA["by_memory_gib"])
"""(family pattern, lowest GiB, highest GiB, card): a memory size that settles an ambiguous name. H100 NVL (94 GB)
reads about 93.6 GiB in NVML (95830 MiB) and a little less in torch; the 80 GB parts read 79.6 GiB."""

LEFT_OUT: tuple[tuple[str, str], ...] = tuple((card, why) for card, why in _DATA["left_out"])
"""Cards asked for that the table leaves out, and why (docs/spec.md section 5 lists them)."""

MIG_NAME: str = _DATA["mig_name"]
"""The MIG suffix of a device name (``"NVIDIA A100-SXM4-40GB MIG 3g.20gb"``): the card is matched without it."""

VGPU_NAME: str = _DATA["vgpu_name"]
"""A vGPU profile's name (``"NVIDIA A10-4Q"``, ``"GRID A100-40C"``): its share of the card cannot be read."""

SM_SOURCES: str = _DATA["notes"]["SMS"]
"""Where the rows' SM (CU) counts come from."""
