"""The fake GPU backend's MIG GPU instances: GPM per instance, modelled as the whole-GPU GPM is.

Each instance of a MIG-enabled fake device follows its own timeline (default: the device's); a sample
snapshots the integrals of its levels and the values are (I(t2) - I(t1)) / (t2 - t1), as
``nvmlGpmMigSampleGet`` + ``nvmlGpmMetricsGet`` give interval averages; the first sample only primes the
pair and a sample within 100 ms of the previous repeats its values. A device without GPM, an injected fault
on field ``"mig_gpm"`` or a device with no instance gives no instance figures and the reason. Used by
:mod:`tests.fakes.gpu.fake` under its lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.fakes.gpu.fake_profiles import DeviceProfile, Phase
from tests.fakes.gpu.fake_timeline import integrals_at
from trainmeter.gpu.backend import (
    GPM_FIELDS,
    MIG_GPM_WHAT,
    REASON_GPM_FIRST_SAMPLE,
    REASON_MIG_GPM_NOT_SUPPORTED,
    REASON_MIG_NO_INSTANCES,
    REASON_NO_PERMISSION,
    MigGpmSample,
)

MIN_WINDOW_S = 0.1


def mig_uuid(index: int, gpu_instance_id: int) -> str:
    """Deterministic ``MIG-...`` UUID for GPU instance ``gpu_instance_id`` of fake device ``index``."""
    return f"MIG-fa4e0000-0000-4000-8000-{index:06d}{gpu_instance_id:06d}"


class FakeMigGpm:
    """Per-instance GPM state of one fake device (not thread-safe: the fake's lock guards it).

    Args:
        index: The device's index.
        profile: Its profile (``mig``, ``gpm``, ``mig_instances``).
        timelines: Phases per GPU instance id; an instance without one follows ``default``.
        default: The device's own timeline.
    """

    def __init__(self, index: int, profile: DeviceProfile, timelines: Mapping[int, Sequence[Phase]],
                 default: Sequence[Phase]) -> None:
        self._index = index
        self._profile = profile
        self._phases = {gi: tuple(timelines.get(gi, default)) for gi in profile.mig_instances}
        self._prev: dict[int, tuple[float, dict[str, float]]] = {}
        self._last: dict[int, MigGpmSample] = {}

    def instances(self) -> tuple[tuple[int, str], ...]:
        """``(gpu_instance_id, MIG UUID)`` of each instance (``()`` unless MIG is on)."""
        return tuple((gi, mig_uuid(self._index, gi)) for gi in self._phases) if self._profile.mig else ()

    def read(self, t_s: float, fault: str | None) -> tuple[tuple[MigGpmSample, ...], str | None]:
        """Every instance's GPM ``t_s`` seconds after the timelines began, or ``()`` and the reason.

        Args:
            t_s: Seconds since the fake's start.
            fault: ``"not_supported"`` / ``"no_permission"`` injected on field ``"mig_gpm"``, or ``None``.
        """
        p = self._profile
        if not p.mig:
            return (), None
        if not p.gpm or fault == "not_supported":
            return (), REASON_MIG_GPM_NOT_SUPPORTED
        if fault == "no_permission":
            return (), REASON_NO_PERMISSION.format(MIG_GPM_WHAT)
        if not self._phases:
            return (), REASON_MIG_NO_INSTANCES
        out = []
        for gi, phases in self._phases.items():
            integrals = integrals_at(phases, t_s, GPM_FIELDS)
            uuid = mig_uuid(self._index, gi)
            prev = self._prev.get(gi)
            if prev is None:
                self._prev[gi] = (t_s, integrals)
                self._last[gi] = MigGpmSample(gpu_instance_id=gi, uuid=uuid, unavailable=tuple(
                    (f, REASON_GPM_FIRST_SAMPLE) for f in GPM_FIELDS))
            elif t_s - prev[0] >= MIN_WINDOW_S:  # within 100 ms the previous values repeat, as NVML's do
                window_s = t_s - prev[0]
                values = {k: (integrals[k] - prev[1][k]) / window_s for k in GPM_FIELDS}
                self._prev[gi] = (t_s, integrals)
                self._last[gi] = MigGpmSample(gpu_instance_id=gi, uuid=uuid, values=values, gpm_window_s=window_s)
            out.append(self._last[gi])
        return tuple(out), None
