"""CPU package energy (microjoules) from Linux RAPL (``/sys/class/powercap``), where readable (docs/spec.md section 13).

Which domains, the wrap and the root-only read: spec section 13. Pure reads of small files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")


@dataclass(frozen=True, slots=True, kw_only=True)
class RaplReading:
    """One read of every package domain: folder name -> cumulative energy and wrap-around range (``None`` unknown),
    microjoules; ``missing`` says why there is no reading, else ``None``."""

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
