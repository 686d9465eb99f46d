"""What the GPU wing publishes to the others: its sampler's readings and its passport section (a frozen view)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class GpuReadings(Protocol):
    """The readings of the GPU sampler other wings may use (:class:`trainmeter.gpu.sampler.GpuSampler`).

    Thread safety: every member may be read from any thread (the sampler's own lock).
    """

    unavailable_reason: str | None
    devices: Mapping[int, Any]
    energy_start: dict[int, tuple[float | None, str | None]] | None
    energy_end: dict[int, tuple[float | None, str | None]] | None
    energy_start_s: float | None
    energy_end_s: float | None

    @property
    def indices(self) -> tuple[int, ...]: ...

    def latest(self) -> Mapping[int, Any]: ...

    def window_averages(self) -> Mapping[int, Any]: ...


@dataclass(frozen=True)
class GpuView:
    """The GPU wing at the time of asking.

    Attributes:
        readings: The sampler's readings, or ``None`` before it started (or with the wing off).
        opens_in_background: NVML opens on the sampler's own thread, which also reads the energy
            counters at the open and before the close (``energy_start``/``energy_end``).
        section: The last ``gpu`` passport section built, or ``None`` before the passport.
    """

    readings: GpuReadings | None = None
    opens_in_background: bool = False
    section: Mapping[str, Any] | None = None

    def opening(self) -> bool:
        """NVML is still being opened on the sampler's thread (no device known yet)."""
        from trainmeter.gpu.sampler import REASON_OPENING

        return self.readings is not None and self.readings.unavailable_reason == REASON_OPENING
