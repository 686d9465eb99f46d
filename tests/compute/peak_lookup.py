"""Lookups of compute/peaks.py's table that only the tests and benchmarks/gpu_ladder_check.py ask: the card a name
matches, why a device has no peak, and the table's notes that docs/peaks.md shows."""

from __future__ import annotations

from trainmeter.compute.peaks import _DATA, PEAK_FLAGS, _find, _lookup

LEFT_OUT: tuple[tuple[str, str], ...] = tuple(map(tuple, _DATA["left_out"]))  # cards left out, and why
SM_SOURCES: str = _DATA["notes"]["SMS"]  # where the rows' SM (CU) counts come from


def match_card(device_name: object, *, pci_device_id: int | None = None,
               memory_bytes: float | None = None) -> str | None:
    """The card an NVML or torch device name (where ambiguous, its PCI device id: NVML's ``pciDeviceId`` or the
    bare 16-bit id; or memory in bytes) matches, or ``None``."""
    row = _find(device_name, pci_device_id, memory_bytes)
    return row.card if row is not None else None


def why_no_peak(device_name: str | None, dtype: object = "bf16", *, pci_device_id: int | None = None,
                memory_bytes: float | None = None, sm_count: int | None = None) -> str | None:
    """Why :func:`trainmeter.compute.peaks.peak_flops` gives no peak (ending with the flags that enable MFU anyway),
    or ``None``."""
    try:
        return _lookup(device_name, dtype, pci_device_id, memory_bytes, sm_count)[1]
    except ValueError as exc:
        return f"{exc}; pass {PEAK_FLAGS} to declare one"
