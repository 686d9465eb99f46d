"""GPU energy over a window: NVML's cumulative counter differenced, else sampled power integrated.

The two sources: docs/spec.md section 13. Pure functions over readings; any thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

SOURCE_COUNTER = "nvml_energy_counter"
SOURCE_POWER = "nvml_power_integrated"
MIN_POWER_SAMPLES = 2  # power samples needed in the window before integrating them (one is not an average)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceEnergy:
    """Energy one device used over a window of ``window_s`` seconds: ``joules`` (J) and ``avg_watts`` (W), ``None``
    when neither source worked; ``source`` (:data:`SOURCE_COUNTER`, :data:`SOURCE_POWER`) or ``None``; ``missing``:
    why ``joules`` is ``None`` (or why the counter was not used)."""

    index: int
    name: str
    window_s: float
    joules: float | None = None
    avg_watts: float | None = None
    source: str | None = None
    missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the passport's ``energy.devices`` entry), with ``kwh``."""
        return {**asdict(self), "kwh": None if self.joules is None else self.joules / 3.6e6}


def read_counters(backend: Any, indices: Iterable[int]) -> dict[int, tuple[float | None, str | None]]:
    """Read each device's energy counter (mJ) now; ``(None, reason)`` where it cannot. Never raises."""
    read = getattr(backend, "total_energy_mj", None)
    if read is None:
        return dict.fromkeys(indices, (None, "this GPU backend has no energy counter"))
    out: dict[int, tuple[float | None, str | None]] = {}
    for index in indices:
        try:
            out[index] = read(index)
        except Exception as exc:  # noqa: BLE001 - a backend fault is a reason, never an exception
            out[index] = (None, f"energy counter read failed: {exc!r}")
    return out


def from_counter(index: int, name: str, start_mj: float, end_mj: float, window_s: float) -> DeviceEnergy:
    """Energy from two counter readings; a counter that went backwards (driver reload) is missing."""
    if end_mj < start_mj:
        return DeviceEnergy(index=index, name=name, window_s=window_s,
                            missing="the energy counter went backwards (driver reloaded?)")
    joules = (end_mj - start_mj) / 1000.0
    return DeviceEnergy(index=index, name=name, joules=joules, window_s=window_s, source=SOURCE_COUNTER,
                        avg_watts=joules / window_s if window_s > 0 else None)


def from_power(index: int, name: str, mean_power_w: float | None, n_samples: int, window_s: float,
               counter_missing: str | None) -> DeviceEnergy:
    """Energy as mean sampled power times the window; missing with fewer than two samples."""
    if mean_power_w is None or n_samples < MIN_POWER_SAMPLES or window_s <= 0:
        why = ("no power readings in the window" if mean_power_w is None
               else f"{n_samples} power sample(s) in the window; integrating needs {MIN_POWER_SAMPLES}")
        reason = f"{counter_missing}; {why}" if counter_missing else why
        return DeviceEnergy(index=index, name=name, window_s=window_s, missing=reason)
    return DeviceEnergy(index=index, name=name, joules=mean_power_w * window_s, avg_watts=mean_power_w,
                        window_s=window_s, source=SOURCE_POWER, missing=counter_missing)
