"""CPU package energy from Linux RAPL (``/sys/class/powercap``), where it is readable.

Each top-level domain whose ``name`` starts with ``package`` (``intel-rapl:0`` ...) has a
cumulative ``energy_uj`` counter (microjoules) that wraps at ``max_energy_range_uj``. Sub-
domains (``core``, ``uncore``, ``dram``) and ``psys`` are left out so nothing is counted twice.
Since 2020 kernels make ``energy_uj`` root-only (CVE-2020-8694); then :func:`read_rapl` says so.

Pure reads of small files; thread safety: none needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")


@dataclass(frozen=True, slots=True, kw_only=True)
class RaplReading:
    """One read of every package domain.

    Attributes:
        energy_uj: Domain folder name -> cumulative energy, microjoules.
        range_uj: Domain folder name -> wrap-around range, microjoules (``None`` unknown).
        missing: Why there is no reading (no powercap, not readable), else ``None``.
    """

    energy_uj: dict[str, int]
    range_uj: dict[str, int | None]
    missing: str | None = None


def read_rapl(root: Path = POWERCAP_ROOT) -> RaplReading:
    """Read the package domains under ``root``; never raises."""
    if not root.is_dir():
        return RaplReading(energy_uj={}, range_uj={}, missing=f"no RAPL here ({root} does not exist)")
    energy: dict[str, int] = {}
    ranges: dict[str, int | None] = {}
    refused = []
    for domain in sorted(root.glob("*rapl:*")):
        if domain.name.count(":") != 1:  # a sub-domain (intel-rapl:0:0)
            continue
        try:
            name = (domain / "name").read_text().strip()
        except OSError:
            continue
        if not name.startswith("package"):
            continue
        try:
            energy[domain.name] = int((domain / "energy_uj").read_text().strip())
        except (OSError, ValueError):
            refused.append(domain.name)
            continue
        try:
            ranges[domain.name] = int((domain / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            ranges[domain.name] = None
    if not energy:
        why = (f"RAPL energy_uj under {root} is not readable by this user (root-only since CVE-2020-8694)"
               if refused else f"no RAPL package domain under {root}")
        return RaplReading(energy_uj={}, range_uj={}, missing=why)
    return RaplReading(energy_uj=energy, range_uj=ranges)


def rapl_joules(start: RaplReading, end: RaplReading) -> tuple[float | None, str | None]:
    """Joules used by all package domains between two reads (one wrap per domain allowed)."""
    if start.missing or end.missing:
        return None, start.missing or end.missing
    total_uj = 0
    for name, first in start.energy_uj.items():
        last = end.energy_uj.get(name)
        if last is None:
            return None, f"RAPL domain {name} disappeared during the run"
        delta = last - first
        if delta < 0:
            wrap = start.range_uj.get(name)
            if wrap is None:
                return None, f"RAPL domain {name} wrapped and its range is unknown"
            delta += wrap
        total_uj += delta
    return total_uj / 1e6, None
