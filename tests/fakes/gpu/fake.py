"""A scripted fake GPU backend for tests and benchmarks (no NVML, no GPU).

:class:`FakeNvml` implements :class:`~trainmeter.gpu.backend.GpuBackend` and behaves like
:class:`~trainmeter.gpu.nvml.NvmlBackend` where it matters:

- Device profiles (:data:`PROFILES`): H100 SXM and H200 with GPM, A100 and T4 without GPM,
  and an H100 in MIG mode (no GPU-Util, no whole-GPU GPM), without and with GPM per MIG GPU instance
  (:mod:`tests.fakes.gpu.fake_mig`; a fault on field ``"mig_gpm"`` takes it away with its reason).
- Each device follows a piecewise-constant timeline of :class:`Levels` (:class:`Phase`
  list; the last phase holds forever) read at the injected clock.
- GPM is modelled as the real thing is: each sample snapshots the integral of the levels
  and the values are (I(t2) - I(t1)) / (t2 - t1), so they are interval averages; the first
  sample only primes the pair; a second sample within 100 ms repeats the previous values.
- A cumulative energy counter (:meth:`FakeNvml.total_energy_mj`): the integral of the
  timeline's power, in mJ, so a test can pin joules from the levels it scripted.
- Error injection with :meth:`FakeNvml.inject`: NotSupported / NoPermission on a field or on
  GPM, a device that cannot be opened, the GPU lost mid-run, slow calls; and
  :func:`open_fake` for init failures (library missing, driver not loaded, no devices).

Thread safety: a lock guards all mutable state; ``sample`` may run from several threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tests.fakes.gpu.fake_mig import FakeMigGpm
from tests.fakes.gpu.fake_profiles import (  # re-exported for tests
    DATALOADER_STALL,
    GEMM,
    IDLE,
    LYING_GPU_UTIL,
    PROFILES,
    DeviceProfile,
    Levels,
    Phase,
)
from tests.fakes.gpu.fake_timeline import integrals_at, levels_at
from trainmeter.core.clock import Clock
from trainmeter.gpu.backend import (
    GPM_FIELDS,
    REASON_DRIVER_NOT_LOADED,
    REASON_ENERGY_WHAT,
    REASON_GPM_FIRST_SAMPLE,
    REASON_GPM_NO_PERMISSION,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    REASON_NO_DEVICES,
    REASON_NO_PERMISSION,
    REASON_NOT_SUPPORTED,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
)
from trainmeter.gpu.sampler import GpuSampler, open_for_run
from trainmeter.gpu.selection import cuda_context_uuids

__all__ = [
    "DATALOADER_STALL",
    "GEMM",
    "IDLE",
    "LYING_GPU_UTIL",
    "PROFILES",
    "DeviceProfile",
    "FakeNvml",
    "Levels",
    "Phase",
    "fake_uuid",
    "open_fake",
]

GPM_MIN_INTERVAL_S = 0.1
ENERGY_AT_START_MJ = 5.0e9
"""The fake energy counter's reading when the fake is built (energy since "driver load"), mJ."""
_ERROR_KINDS = ("not_supported", "no_permission", "gpu_lost", "slow", "unopenable")


@dataclass(slots=True)
class _Fault:
    kind: str
    field: str | None
    from_s: float | None
    after_calls: int | None
    delay_s: float


@dataclass(slots=True)
class _FakeDevice:
    index: int
    profile: DeviceProfile
    uuid: str
    phases: tuple[Phase, ...]
    faults: list[_Fault] = field(default_factory=list)
    calls: int = 0
    lost: bool = False
    gpm_prev: tuple[float, dict[str, float]] | None = None
    gpm_last: tuple[dict[str, float], float | None] = field(default_factory=lambda: ({}, None))
    mig: FakeMigGpm | None = None


def fake_uuid(index: int) -> str:
    """Deterministic NVML-style UUID for fake device ``index``."""
    return f"GPU-fa4e0000-0000-4000-8000-{index:012d}"


class FakeNvml:
    """Scripted :class:`~trainmeter.gpu.backend.GpuBackend`.

    Args:
        devices: Profile keys (see :data:`PROFILES`) or profiles, one per NVML index.
        clock: The clock that drives the timelines and GPM intervals.
        timelines: Phases per device index; a device without one follows
            ``default_timeline``.
        default_timeline: Phases for devices not in ``timelines`` (default: ``GEMM``).
        mig_timelines: Phases per ``(device index, GPU instance id)`` of a MIG-enabled device; an instance
            without one follows its device's timeline.
        driver: Driver version string to report.
        sleep: Called with the delay of an injected slow call (default ``time.sleep``;
            pass ``clock.advance`` to simulate slowness without waiting).
    """

    def __init__(
        self,
        devices: Sequence[str | DeviceProfile],
        *,
        clock: Clock,
        timelines: Mapping[int, Sequence[Phase]] | None = None,
        default_timeline: Sequence[Phase] = (Phase(duration_s=1e9, levels=GEMM),),
        mig_timelines: Mapping[tuple[int, int], Sequence[Phase]] | None = None,
        driver: str = "595.45.04",
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._clock = clock
        self._sleep = sleep or time.sleep
        self._driver = driver
        self._lock = threading.Lock()
        self._start_s = clock()
        self.closed = False
        timelines = timelines or {}
        self._devices: list[_FakeDevice] = []
        for i, spec in enumerate(devices):
            profile = PROFILES[spec] if isinstance(spec, str) else spec
            phases = tuple(timelines.get(i, default_timeline))
            if not phases:
                raise ValueError(f"device {i}: timeline needs at least one phase")
            mig = FakeMigGpm(i, profile, {gi: ph for (d, gi), ph in (mig_timelines or {}).items() if d == i}, phases)
            self._devices.append(_FakeDevice(index=i, profile=profile, uuid=fake_uuid(i), phases=phases, mig=mig))

    @classmethod
    def lying_gpu_util(cls, *, clock: Clock, devices: Sequence[str] = ("h100_sxm",)) -> FakeNvml:
        """Devices reading GPU-Util 100% with SM activity 5% (docs/spec.md section 8's misleading GPU-Util)."""
        return cls(devices, clock=clock, default_timeline=(Phase(duration_s=1e9, levels=LYING_GPU_UTIL),))

    # --- error injection -------------------------------------------------------------------

    def inject(
        self,
        index: int,
        kind: str,
        *,
        field: str | None = None,
        from_s: float | None = None,
        after_calls: int | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """Inject a fault into device ``index``.

        Args:
            index: Device index.
            kind: ``"not_supported"`` or ``"no_permission"`` (on ``field``, a GpuSample
                field name or ``"gpm"`` for all GPM fields), ``"unopenable"`` (NoPermission
                on the handle: the device cannot be opened), ``"gpu_lost"`` (sample raises a
                fatal error from then on), ``"slow"`` (each sample call sleeps ``delay_s``).
            field: The field for ``not_supported``/``no_permission``.
            from_s: Fault active from this clock time on (default: now).
            after_calls: Fault active after this many ``sample`` calls on the device.
            delay_s: Delay for ``"slow"``, seconds.
        """
        if kind not in _ERROR_KINDS:
            raise ValueError(f"unknown fault {kind!r}; valid: {', '.join(_ERROR_KINDS)}")
        with self._lock:
            self._devices[index].faults.append(
                _Fault(kind=kind, field=field, from_s=from_s, after_calls=after_calls, delay_s=delay_s)
            )

    # --- GpuBackend ------------------------------------------------------------------------

    def device_count(self) -> int:
        """Number of fake devices."""
        return len(self._devices)

    def driver_version(self) -> str | None:
        """The scripted driver version."""
        return self._driver

    def device_info(self, index: int) -> GpuDeviceInfo:
        """Static facts from the device's profile (and any ``unopenable`` fault)."""
        dev = self._devices[index]
        p = dev.profile
        if any(f.kind == "unopenable" for f in dev.faults):
            return GpuDeviceInfo(index=index, name="", uuid="", reason=REASON_NO_PERMISSION.format(f"GPU {index}"))
        gpm_reason = None
        if p.mig:
            gpm_reason = REASON_MIG
        elif not p.gpm:
            gpm_reason = REASON_GPM_NOT_SUPPORTED
        return GpuDeviceInfo(
            index=index,
            name=p.name,
            uuid=dev.uuid,
            mem_total_bytes=p.mem_total_bytes,
            mig_enabled=p.mig,
            gpm_supported=p.gpm and not p.mig,
            gpm_reason=gpm_reason,
            pci_device_id=p.pci_device_id,
            mig_instances=dev.mig.instances() if dev.mig is not None else (),
        )

    def sample(self, index: int) -> GpuSample:
        """Read device ``index`` at the clock's current time.

        Raises:
            GpuUnavailableError: Lost (fatal), unopenable (fatal) or closed (fatal).
        """
        dev = self._devices[index]
        with self._lock:
            dev.calls += 1
            now_s = self._clock()
            active = [f for f in dev.faults if self._active(f, dev, now_s)]
        delay_s = sum(f.delay_s for f in active if f.kind == "slow")
        if delay_s > 0:
            self._sleep(delay_s)
        with self._lock:
            if self.closed:
                raise GpuUnavailableError("the fake NVML backend is closed", fatal=True)
            if any(f.kind == "unopenable" for f in dev.faults):
                raise GpuUnavailableError(REASON_NO_PERMISSION.format(f"GPU {index}"), fatal=True)
            if dev.lost or any(f.kind == "gpu_lost" for f in active):
                dev.lost = True
                raise GpuUnavailableError(REASON_GPU_LOST, fatal=True)
            return self._build(dev, now_s, active)

    def total_energy_mj(self, index: int) -> tuple[float | None, str | None]:
        """The scripted energy counter: :data:`ENERGY_AT_START_MJ` plus the integral of the
        timeline's ``power_w`` from construction to now, millijoules; never raises.

        A ``not_supported`` / ``no_permission`` fault on field ``"total_energy_mj"`` makes
        it ``(None, reason)``, as an NVML without the counter does.
        """
        dev = self._devices[index]
        with self._lock:
            dev.calls += 1
            now_s = self._clock()
            active = [f for f in dev.faults if self._active(f, dev, now_s)]
            if self.closed:
                return None, "the fake NVML backend is closed"
            if dev.lost or any(f.kind in ("gpu_lost", "unopenable") for f in active):
                return None, REASON_GPU_LOST
            for fault in active:
                if fault.field == "total_energy_mj" and fault.kind == "not_supported":
                    return None, REASON_NOT_SUPPORTED.format(REASON_ENERGY_WHAT)
                if fault.field == "total_energy_mj" and fault.kind == "no_permission":
                    return None, REASON_NO_PERMISSION.format(REASON_ENERGY_WHAT)
            power_j = integrals_at(dev.phases, now_s - self._start_s, ("power_w",))["power_w"]
            return ENERGY_AT_START_MJ + 1000.0 * power_j, None

    def close(self) -> None:
        """Mark the backend closed; later samples raise a fatal error."""
        with self._lock:
            self.closed = True

    # --- internals ---------------------------------------------------------------------------

    def _active(self, fault: _Fault, dev: _FakeDevice, now_s: float) -> bool:
        if fault.from_s is not None and now_s < fault.from_s:
            return False
        return fault.after_calls is None or dev.calls > fault.after_calls

    def _gpm(self, dev: _FakeDevice, now_s: float) -> tuple[dict[str, float], dict[str, str], float | None]:
        p = dev.profile
        if p.mig or not p.gpm:
            reason = REASON_MIG if p.mig else REASON_GPM_NOT_SUPPORTED
            return {}, dict.fromkeys(GPM_FIELDS, reason), None
        integrals = integrals_at(dev.phases, now_s - self._start_s, GPM_FIELDS)
        if dev.gpm_prev is None:
            dev.gpm_prev = (now_s, integrals)
            return {}, dict.fromkeys(GPM_FIELDS, REASON_GPM_FIRST_SAMPLE), None
        t_prev, prev = dev.gpm_prev
        window_s = now_s - t_prev
        if window_s < GPM_MIN_INTERVAL_S:
            values, last_window = dev.gpm_last
            return dict(values), {}, last_window
        values = {k: (integrals[k] - prev[k]) / window_s for k in GPM_FIELDS}
        dev.gpm_prev = (now_s, integrals)
        dev.gpm_last = (values, window_s)
        return dict(values), {}, window_s

    def _build(self, dev: _FakeDevice, now_s: float, active: list[_Fault]) -> GpuSample:
        lv = levels_at(dev.phases, now_s - self._start_s)
        p = dev.profile
        values: dict[str, object] = {
            "util_gpu": lv.util_gpu,
            "mem_used_bytes": lv.mem_used_bytes,
            "mem_total_bytes": p.mem_total_bytes,
            "power_w": lv.power_w,
            "sm_clock_mhz": lv.sm_clock_mhz,
            "sm_clock_max_mhz": p.sm_clock_max_mhz,
            "temperature_c": lv.temperature_c,
        }
        missing: dict[str, str] = {}
        if p.mig:
            values["util_gpu"] = None
            missing["util_gpu"] = REASON_MIG
        gpm_values, gpm_missing, window_s = self._gpm(dev, now_s)
        values.update(gpm_values)
        missing.update(gpm_missing)
        for fault in active:
            if fault.kind not in ("not_supported", "no_permission") or fault.field in (None, "mig_gpm"):
                continue
            targets = GPM_FIELDS if fault.field == "gpm" else (fault.field,)
            for name in targets:
                values[name] = None
                if fault.field == "gpm":
                    gpm_reason = (
                        REASON_GPM_NOT_SUPPORTED
                        if fault.kind == "not_supported"
                        else REASON_GPM_NO_PERMISSION
                    )
                    missing[name] = gpm_reason
                elif fault.kind == "not_supported":
                    missing[name] = REASON_NOT_SUPPORTED.format(name)
                else:
                    missing[name] = REASON_NO_PERMISSION.format(name)
        if all(values.get(name) is None for name in GPM_FIELDS):
            window_s = None
        mig_fault = next((f.kind for f in active if f.field == "mig_gpm"), None)
        mig_gpm, mig_reason = dev.mig.read(now_s - self._start_s, mig_fault) if dev.mig else ((), None)
        sample = GpuSample(
            index=dev.index,
            t_s=now_s,
            gpm_window_s=window_s,
            mig_gpm=mig_gpm,
            mig_gpm_reason=mig_reason,
            unavailable=tuple((k, v) for k, v in missing.items() if values.get(k) is None),
        )
        return replace(sample, **{k: v for k, v in values.items() if v is not None})


def open_fake(fake: FakeNvml | None = None, *, failure: str | None = None) -> GpuBackendResult:
    """Open a fake backend as :func:`~trainmeter.gpu.nvml.open_nvml` would.

    Args:
        fake: The backend to return on success.
        failure: ``"library_missing"``, ``"driver_not_loaded"`` or ``"no_devices"`` to
            simulate an init failure (then ``backend`` is ``None``).
    """
    reasons = {
        "library_missing": REASON_LIBRARY_NOT_FOUND,
        "driver_not_loaded": REASON_DRIVER_NOT_LOADED,
        "no_devices": REASON_NO_DEVICES,
    }
    if failure is not None:
        if failure not in reasons:
            raise ValueError(f"unknown failure {failure!r}; valid: {', '.join(reasons)}")
        return GpuBackendResult(backend=None, reason=reasons[failure])
    if fake is None or fake.device_count() == 0:
        return GpuBackendResult(backend=None, reason=REASON_NO_DEVICES)
    return GpuBackendResult(backend=fake)


def sampler_for_run(gpus: Any = None, *, clock: Clock, open_backend: Callable[..., GpuBackendResult],
                    cuda_uuids: Any = cuda_context_uuids, env: Mapping[str, str] | None = None,
                    **kwargs: Any) -> GpuSampler:
    """A (not yet started) sampler on the devices ``gpus`` names, opened at once on this thread (the owner thread's
    open of :meth:`GpuSampler.in_background`); ``ValueError``: a bad ``gpus``."""
    sampler = GpuSampler(None, (), clock=clock, **kwargs)
    sampler._use(open_for_run(gpus, clock=clock, open_backend=open_backend, cuda_uuids=cuda_uuids, env=env))
    return sampler


def rung(ladder: Any, key: str) -> Any:
    """The ladder's rung with ``key``, DRAM bandwidth included (KeyError if none)."""
    return {r.key: r for r in (*ladder.rungs, ladder.dram_bw_util)}[key]


def sampler_step(sampler: GpuSampler, now_s: float) -> int:
    """Sample, in this thread, every active device of ``sampler`` due at ``now_s`` (what its device threads do, in
    step with a test's clock); returns how many."""
    with sampler._lock:
        due = [st.index for st in sampler._states.values() if st.active and st.claim(now_s, sampler.interval_s)]
    for index in due:
        sampler._sample_device(index)
    return len(due)


def sampler_history(sampler: GpuSampler, index: int) -> tuple[GpuSample, ...]:
    """Recent samples of device ``index`` (at most ``history_len``), oldest first."""
    with sampler._lock:
        st = sampler._states.get(index)
        return tuple(st.history) if st is not None else ()


def passport_of(sampler: GpuSampler, **kwargs: Any) -> dict[str, Any]:
    """The ``gpu`` passport section of ``sampler``, with each sampled device's ladder built from its averages without
    MFU (the GPU wing passes its own, with compute's MFU)."""
    from trainmeter.gpu.extension import gpu_passport_from_sampler, training_averages
    from trainmeter.gpu.ladder import build_ladder

    ladders = {i: build_ladder(avg, device_name=sampler.devices[i].name)
               for i, avg in training_averages(sampler)[0].items() if avg.n_samples > 0}
    return gpu_passport_from_sampler(sampler, **{"ladders": ladders, **kwargs})
