"""The NVML adapter, driven through the REAL ``pynvml`` bindings against a fake C library.

``pynvml`` looks every symbol up with ``getattr(pynvml.nvmlLib, name)``; setting ``nvmlLib``
to an object of plain Python functions makes every real wrapper (struct layouts, version
fields, ``_v2/_v3`` symbol choice, the two-call process-list protocol, error classes) run
against it. Out-parameters arrive as ``byref(x)`` and are written through ``ref._obj``.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.gpu.backend import (
    REASON_DRIVER_NOT_LOADED,
    REASON_GPM_DRIVER_TOO_OLD,
    REASON_GPM_FIRST_SAMPLE,
    REASON_GPM_NOT_SUPPORTED,
    REASON_GPU_LOST,
    REASON_LIBRARY_NOT_FOUND,
    REASON_MIG,
    REASON_MIG_GPM_NOT_SUPPORTED,
    REASON_PYNVML_MISSING,
    GpuUnavailableError,
)
from trainmeter.gpu.nvml import open_nvml

MIB = 1024 * 1024
HANDLE_BASE = 0x1000
MIG_HANDLE_BASE = 100  # MIG device handles: HANDLE_BASE + MIG_HANDLE_BASE + 10 * device + slot


def _index(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value - HANDLE_BASE


class FakeLib:
    """A fake ``libnvidia-ml``: per-device dicts of readings; GPM as integrals over a clock."""

    def __init__(self, clock: FakeClock, devices: list[dict[str, Any]]) -> None:
        self.clock = clock
        self.devices = devices
        self.calls: dict[str, int] = {}
        self.errors: dict[tuple[str, int], int] = {}  # (symbol, device) -> NVML error code
        self.samples: dict[int, tuple[int, float]] = {}  # sample address -> (device, time)
        self.sample_gi: dict[int, int] = {}  # sample address -> MIG GPU instance id (nvmlGpmMigSampleGet)
        self.freed: list[int] = []
        self.buffers: list[Any] = []
        self.per_metric_error: dict[int, int] = {}
        self.nan_metrics: set[int] = set()
        self.ns = SimpleNamespace()
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(self.ns, name, self._wrap(name, getattr(self, name)))

    def _wrap(self, name: str, method: Any) -> Any:
        def fn(*args: Any) -> Any:  # a plain function: pynvml sets attributes such as restype
            self.calls[name] = self.calls.get(name, 0) + 1
            dev = (
                _index(args[0])
                if args and isinstance(args[0], ctypes._Pointer) and "Gpm" not in name[:7]
                else None
            )
            if dev is not None and (name, dev) in self.errors:
                return self.errors[(name, dev)]
            return method(*args)

        return fn

    def remove(self, symbol: str) -> None:
        """Simulate an older driver without ``symbol`` (-> FunctionNotFound)."""
        delattr(self.ns, symbol)

    def replace(self, symbol: str, fn: Any) -> Any:
        """Swap ``symbol`` for ``fn`` (also in pynvml's pointer cache); return the old one."""
        old = getattr(self.ns, symbol)
        setattr(self.ns, symbol, fn)
        pynvml._nvmlGetFunctionPointer_cache.pop(symbol, None)
        return old

    # --- system ---
    def nvmlInitWithFlags(self, flags: int) -> int:
        return 0

    def nvmlShutdown(self) -> int:
        return 0

    def nvmlErrorString(self, code: int) -> bytes:
        return b"fake error"

    def nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = b"595.45.04"
        return 0

    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        ref._obj.value = len(self.devices)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        if ("handle", index.value) in self.errors:
            return self.errors[("handle", index.value)]
        ctypes.cast(ctypes.byref(ref._obj), ctypes.POINTER(ctypes.c_void_p))[0] = HANDLE_BASE + index.value
        return 0

    # --- device ---
    def _d(self, h: Any) -> dict[str, Any]:
        return self.devices[_index(h)]

    def nvmlDeviceGetName(self, h: Any, buf: Any, size: Any) -> int:
        buf.value = self._d(h)["name"].encode()
        return 0

    def nvmlDeviceGetUUID(self, h: Any, buf: Any, size: Any) -> int:
        if _index(h) >= MIG_HANDLE_BASE:  # a MIG device handle
            dev, slot = divmod(_index(h) - MIG_HANDLE_BASE, 10)
            buf.value = self.devices[dev]["mig_slots"][slot][1].encode()
            return 0
        buf.value = self._d(h)["uuid"].encode()
        return 0

    # --- MIG ---
    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any, ref: Any) -> int:
        ref._obj.value = len(self._d(h).get("mig_slots", ()))
        return 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, slot: Any, ref: Any) -> int:
        if self._d(h)["mig_slots"][slot.value] is None:
            return pynvml.NVML_ERROR_NOT_FOUND  # an empty slot
        value = HANDLE_BASE + MIG_HANDLE_BASE + 10 * _index(h) + slot.value
        ctypes.cast(ctypes.byref(ref._obj), ctypes.POINTER(ctypes.c_void_p))[0] = value
        return 0

    def nvmlDeviceGetGpuInstanceId(self, h: Any, ref: Any) -> int:
        dev, slot = divmod(_index(h) - MIG_HANDLE_BASE, 10)
        ref._obj.value = self.devices[dev]["mig_slots"][slot][0]
        return 0

    def nvmlDeviceGetMemoryInfo_v2(self, h: Any, ref: Any) -> int:
        assert ref._obj.version == pynvml.nvmlMemory_v2
        ref._obj.total, ref._obj.used = self._d(h)["total"], self._d(h)["used"]
        return 0

    def nvmlDeviceGetMemoryInfo(self, h: Any, ref: Any) -> int:
        ref._obj.total, ref._obj.used = self._d(h)["total"], self._d(h)["used"] + 1
        return 0

    def nvmlDeviceGetPciInfo_v3(self, h: Any, ref: Any) -> int:
        ref._obj.busId = f"00000000:{0x18 + _index(h):02X}:00.0".encode()
        ref._obj.pciDeviceId = (self._d(h).get("pci_device_id", 0) << 16) | 0x10DE
        return 0

    def nvmlDeviceGetMigMode(self, h: Any, cur: Any, pending: Any) -> int:
        cur._obj.value = pending._obj.value = int(self._d(h).get("mig", False))
        return 0

    def nvmlGpmQueryDeviceSupport(self, h: Any, ref: Any) -> int:
        assert ref._obj.version == pynvml.NVML_GPM_SUPPORT_VERSION
        ref._obj.isSupportedDevice = int(self._d(h)["gpm"])
        return 0

    def nvmlDeviceGetUtilizationRates(self, h: Any, ref: Any) -> int:
        if self._d(h).get("mig"):
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        ref._obj.gpu = self._d(h)["util"]
        return 0

    def nvmlDeviceGetPowerUsage(self, h: Any, ref: Any) -> int:
        ref._obj.value = self._d(h)["power_mw"]
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any, ref: Any) -> int:
        ref._obj.value = 700_000
        return 0

    def nvmlDeviceGetClockInfo(self, h: Any, kind: Any, ref: Any) -> int:
        assert kind.value == pynvml.NVML_CLOCK_SM
        ref._obj.value = 1755
        return 0

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: Any, ref: Any) -> int:
        ref._obj.value = 1980
        return 0

    def nvmlDeviceGetTemperatureV(self, h: Any, ref: Any) -> int:
        ref._obj.temperature = 71
        return 0

    def nvmlDeviceGetTemperature(self, h: Any, sensor: Any, ref: Any) -> int:
        ref._obj.value = 70
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, ref: Any) -> int:
        ref._obj.value = 0x4 | 0x40
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, count: Any, infos: Any) -> int:
        procs = self._d(h)["procs"]
        if infos is None:
            count._obj.value = len(procs)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if procs else 0
        for i, (pid, used) in enumerate(procs):
            infos[i].pid = pid
            infos[i].usedGpuMemory = used if used is not None else 2**64 - 1
        count._obj.value = len(procs)
        return 0

    # --- GPM ---
    def nvmlGpmSampleAlloc(self, ref: Any) -> int:
        buf = (ctypes.c_char * 16)()
        self.buffers.append(buf)
        ref._obj.contents = pynvml.struct_c_nvmlGpmSample_t.from_buffer(buf)
        return 0

    def nvmlGpmSampleFree(self, sample: Any) -> int:
        self.freed.append(ctypes.addressof(sample.contents))
        return 0

    def nvmlGpmSampleGet(self, h: Any, sample: Any) -> int:
        self.samples[ctypes.addressof(sample.contents)] = (_index(h), self.clock())
        self.sample_gi.pop(ctypes.addressof(sample.contents), None)
        return 0

    def nvmlGpmMigSampleGet(self, h: Any, gpu_instance_id: int, sample: Any) -> int:
        self.samples[ctypes.addressof(sample.contents)] = (_index(h), self.clock())
        self.sample_gi[ctypes.addressof(sample.contents)] = gpu_instance_id
        return 0

    def nvmlGpmMetricsGet(self, ref: Any) -> int:
        mg = ref._obj
        assert mg.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        dev1, t1 = self.samples[ctypes.addressof(mg.sample1.contents)]
        dev2, t2 = self.samples[ctypes.addressof(mg.sample2.contents)]
        assert dev1 == dev2 and t2 > t1, "samples must be same device, older first"
        gi = self.sample_gi.get(ctypes.addressof(mg.sample2.contents))
        assert gi == self.sample_gi.get(ctypes.addressof(mg.sample1.contents)), "samples must be same instance"
        levels = self.devices[dev1]["gpm_levels"] if gi is None else self.devices[dev1]["mig_levels"][gi]
        for i in range(mg.numMetrics):
            metric_id = mg.metrics[i].metricId
            mg.metrics[i].nvmlReturn = self.per_metric_error.get(metric_id, 0)
            mg.metrics[i].value = math.nan if metric_id in self.nan_metrics else levels.get(metric_id, 0.0)
        return 0


def _device(
    name: str, *, gpm: bool, mig: bool = False, procs: list[tuple[int, int | None]] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "uuid": f"GPU-{abs(hash(name)) % 10**8:08d}-aaaa-bbbb-cccc-000000000000",
        "total": 80 * 1024**3,
        "used": 60 * 1024**3,
        "util": 97,
        "power_mw": 650_500,
        "gpm": gpm,
        "mig": mig,
        "procs": [(os.getpid(), 5 * 1024**3), (999_999, None)] if procs is None else procs,
        # GPM in the driver's units: percent for 2/3/5/7/10, MiB/s for 20/21/60/61
        "gpm_levels": {
            2: 50.0,
            3: 30.0,
            5: 40.0,
            7: 35.0,
            10: 25.0,
            20: 100.0,
            21: 200.0,
            60: 300.0,
            61: 400.0,
        },
    }


@pytest.fixture
def fakelib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    clock = FakeClock(100.0)
    lib = FakeLib(
        clock, [_device("NVIDIA H100 80GB HBM3", gpm=True) | {"pci_device_id": 0x2330},
                _device("NVIDIA A100-SXM4-40GB", gpm=False) | {"pci_device_id": 0x20B0}]
    )
    monkeypatch.setattr(pynvml, "nvmlLib", lib.ns)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return lib


def _open(lib: FakeLib) -> Any:
    result = open_nvml(clock=lib.clock)
    assert result.reason is None, result.reason
    return result.backend


def test_open_nvml_reports_library_not_found_on_a_machine_without_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    result = open_nvml()
    assert result.backend is None
    assert result.reason == REASON_LIBRARY_NOT_FOUND


def test_open_nvml_reports_driver_not_loaded(fakelib: FakeLib) -> None:
    fakelib.replace("nvmlInitWithFlags", lambda flags: pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    result = open_nvml()
    assert result.backend is None and result.reason == REASON_DRIVER_NOT_LOADED


def test_open_nvml_reports_missing_pynvml_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = open_nvml()
    assert result.backend is None and result.reason == REASON_PYNVML_MISSING


def test_device_info_comes_from_real_bindings(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    assert backend.device_count() == 2
    assert backend.driver_version() == "595.45.04"
    h100, a100 = backend.device_info(0), backend.device_info(1)
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.uuid.startswith("GPU-")
    assert h100.mem_total_bytes == 80 * 1024**3
    assert h100.gpm_supported and h100.mig_enabled is False
    assert not a100.gpm_supported and a100.gpm_reason == REASON_GPM_NOT_SUPPORTED


def test_device_info_carries_the_pci_device_id_from_the_upper_half_of_pci_device_id(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    assert backend.device_info(0).pci_device_id == 0x2330
    assert backend.device_info(1).pci_device_id == 0x20B0


def test_sample_converts_units_of_basic_readings(fakelib: FakeLib) -> None:
    s = _open(fakelib).sample(0)
    assert s.util_gpu == pytest.approx(0.97)
    assert s.power_w == pytest.approx(650.5)
    assert s.mem_used_bytes == 60 * 1024**3  # v2: used excludes reserved
    assert s.sm_clock_mhz == 1755 and s.sm_clock_max_mhz == 1980
    assert s.temperature_c == 71
    assert s.t_s == 100.0


def test_gpm_first_sample_primes_then_second_gives_interval_averages(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    first = backend.sample(0)
    assert first.sm_activity is None
    assert first.unavailable_reason("sm_activity") == REASON_GPM_FIRST_SAMPLE
    fakelib.clock.advance(0.5)
    s = backend.sample(0)
    assert s.sm_activity == pytest.approx(0.50) and s.sm_occupancy == pytest.approx(0.30)
    assert s.tensor_activity == pytest.approx(0.40) and s.hmma_activity == pytest.approx(0.35)
    assert s.dram_bw_util == pytest.approx(0.25)
    assert s.gpm_window_s == pytest.approx(0.5)


def test_gpm_mib_per_s_metrics_become_bytes_per_s(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    backend.sample(0)
    fakelib.clock.advance(1.0)
    s = backend.sample(0)
    assert s.pcie_tx_bytes_per_s == 100 * MIB and s.pcie_rx_bytes_per_s == 200 * MIB
    assert s.nvlink_rx_bytes_per_s == 300 * MIB  # id 60 is RX
    assert s.nvlink_tx_bytes_per_s == 400 * MIB  # id 61 is TX


def test_gpm_samples_rotate_so_each_window_is_the_last_interval(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    for _ in range(4):
        backend.sample(0)
        fakelib.clock.advance(0.5)
    assert backend.sample(0).gpm_window_s == pytest.approx(0.5)
    assert fakelib.calls["nvmlGpmSampleAlloc"] == 2  # two buffers, reused


def test_gpm_sample_within_100ms_repeats_previous_values(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    backend.sample(0)
    fakelib.clock.advance(0.5)
    backend.sample(0)
    gets = fakelib.calls["nvmlGpmSampleGet"]
    fakelib.clock.advance(0.05)
    s = backend.sample(0)
    assert fakelib.calls["nvmlGpmSampleGet"] == gets
    assert s.sm_activity == pytest.approx(0.5)


def test_gpm_per_metric_error_and_nan_give_none_with_reason(fakelib: FakeLib) -> None:
    fakelib.per_metric_error[7] = pynvml.NVML_ERROR_NOT_SUPPORTED
    fakelib.nan_metrics.add(10)
    backend = _open(fakelib)
    backend.sample(0)
    fakelib.clock.advance(0.5)
    s = backend.sample(0)
    assert s.hmma_activity is None and "not supported" in (s.unavailable_reason("hmma_activity") or "")
    assert s.dram_bw_util is None and "not valid" in (s.unavailable_reason("dram_bw_util") or "")
    assert s.sm_activity == pytest.approx(0.5)


def test_device_without_gpm_has_none_gpm_fields_with_reason(fakelib: FakeLib) -> None:
    s = _open(fakelib).sample(1)
    assert s.sm_activity is None and s.unavailable_reason("tensor_activity") == REASON_GPM_NOT_SUPPORTED
    assert "nvmlGpmSampleGet" not in fakelib.calls


def test_old_driver_without_gpm_symbols_reports_driver_too_old(fakelib: FakeLib) -> None:
    fakelib.remove("nvmlGpmQueryDeviceSupport")
    backend = _open(fakelib)
    assert backend.device_info(0).gpm_reason == REASON_GPM_DRIVER_TOO_OLD
    assert backend.sample(0).sm_activity is None


def test_not_supported_reading_is_none_and_not_retried(fakelib: FakeLib) -> None:
    fakelib.errors[("nvmlDeviceGetPowerUsage", 0)] = pynvml.NVML_ERROR_NOT_SUPPORTED
    backend = _open(fakelib)
    first = backend.sample(0)
    backend.sample(0)
    assert first.power_w is None and "not supported" in (first.unavailable_reason("power_w") or "")
    assert fakelib.calls["nvmlDeviceGetPowerUsage"] == 1
    assert first.util_gpu is not None


def test_no_permission_on_a_reading_gives_none_with_reason(fakelib: FakeLib) -> None:
    fakelib.errors[("nvmlDeviceGetPowerUsage", 0)] = pynvml.NVML_ERROR_NO_PERMISSION
    s = _open(fakelib).sample(0)
    assert s.power_w is None and "no permission" in (s.unavailable_reason("power_w") or "")


def test_missing_versioned_symbols_fall_back_to_older_calls(fakelib: FakeLib) -> None:
    fakelib.remove("nvmlDeviceGetTemperatureV")
    fakelib.remove("nvmlDeviceGetMemoryInfo_v2")
    s = _open(fakelib).sample(0)
    assert s.temperature_c == 70
    assert s.mem_used_bytes == 60 * 1024**3 + 1  # v1 semantics


def test_gpu_lost_raises_fatal_error_for_that_device_only(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    fakelib.errors[("nvmlDeviceGetUtilizationRates", 0)] = pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuUnavailableError) as info:
        backend.sample(0)
    assert info.value.fatal and info.value.reason == REASON_GPU_LOST
    assert backend.sample(1).util_gpu == pytest.approx(0.97)


def test_device_without_permission_is_listed_with_reason_and_not_sampled(fakelib: FakeLib) -> None:
    fakelib.errors[("handle", 1)] = pynvml.NVML_ERROR_NO_PERMISSION
    backend = _open(fakelib)
    assert backend.device_count() == 2
    assert "no permission" in (backend.device_info(1).reason or "")
    with pytest.raises(GpuUnavailableError) as info:
        backend.sample(1)
    assert info.value.fatal


def test_mig_enabled_gpu_reports_mig_reason_for_util_and_gpm(fakelib: FakeLib) -> None:
    fakelib.devices[0]["mig"] = True
    backend = _open(fakelib)
    assert backend.device_info(0).mig_enabled is True
    s = backend.sample(0)
    assert s.util_gpu is None and s.unavailable_reason("util_gpu") == REASON_MIG
    assert s.unavailable_reason("sm_activity") == REASON_MIG
    assert s.power_w == pytest.approx(650.5)


def _mig_on(lib: FakeLib, index: int = 0) -> None:
    lib.devices[index]["mig"] = True
    # slot 1 empty; two compute instances of GPU instance 2 (one entry per GPU instance)
    lib.devices[index]["mig_slots"] = [(1, "MIG-aaaa"), None, (2, "MIG-bbbb"), (2, "MIG-cccc")]
    lib.devices[index]["mig_levels"] = {1: {2: 80.0, 5: 60.0}, 2: {2: 10.0, 5: 0.0}}


def test_mig_gpu_reads_gpm_per_gpu_instance_through_nvml_gpm_mig_sample_get(fakelib: FakeLib) -> None:
    _mig_on(fakelib)
    backend = _open(fakelib)
    assert backend.device_info(0).mig_instances == ((1, "MIG-aaaa"), (2, "MIG-bbbb"))
    first = backend.sample(0)
    assert [m.unavailable[0][1] for m in first.mig_gpm] == [REASON_GPM_FIRST_SAMPLE] * 2
    fakelib.clock.advance(1.0)
    s = backend.sample(0)
    one, two = s.mig_gpm
    assert (one.gpu_instance_id, one.uuid, two.gpu_instance_id) == (1, "MIG-aaaa", 2)
    assert one.values["sm_activity"] == pytest.approx(0.8) and one.values["tensor_activity"] == pytest.approx(0.6)
    assert two.values["sm_activity"] == pytest.approx(0.1) and one.gpm_window_s == pytest.approx(1.0)
    assert s.mig_gpm_reason is None and s.tensor_activity is None  # the whole GPU: no GPM in MIG mode
    assert fakelib.calls["nvmlGpmMigSampleGet"] == 4 and "nvmlGpmSampleGet" not in fakelib.calls
    backend.close()
    assert len(fakelib.freed) == 4


def test_mig_gpu_without_gpm_says_per_instance_gpm_is_not_supported(fakelib: FakeLib) -> None:
    _mig_on(fakelib, 1)  # the A100: no GPM
    backend = _open(fakelib)
    s = backend.sample(1)
    assert backend.device_info(1).mig_instances == ()
    assert s.mig_gpm == () and s.mig_gpm_reason == REASON_MIG_GPM_NOT_SUPPORTED
    assert backend.sample(0).mig_gpm == () and backend.sample(0).mig_gpm_reason is None  # MIG off


def test_mig_gpm_refused_at_runtime_is_said_once_and_not_retried(fakelib: FakeLib) -> None:
    _mig_on(fakelib)
    calls: list[int] = []
    fakelib.replace("nvmlGpmMigSampleGet", lambda h, gi, sample: calls.append(gi) or pynvml.NVML_ERROR_NO_PERMISSION)
    backend = _open(fakelib)
    for _ in range(3):
        s = backend.sample(0)
        fakelib.clock.advance(1.0)
    assert calls == [1]
    assert s.mig_gpm == () and "GPM per MIG GPU instance" in s.mig_gpm_reason and "no permission" in s.mig_gpm_reason


def test_close_frees_gpm_buffers_and_is_idempotent(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    backend.sample(0)
    backend.close()
    backend.close()
    assert len(fakelib.freed) == 2 and fakelib.calls["nvmlShutdown"] == 1
    with pytest.raises(GpuUnavailableError):
        backend.sample(0)


def test_gpm_not_supported_at_runtime_disables_gpm_with_reason(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    fakelib.replace("nvmlGpmSampleGet", lambda h, s: pynvml.NVML_ERROR_NOT_SUPPORTED)
    s = backend.sample(0)
    assert s.sm_activity is None and s.unavailable_reason("sm_activity") == REASON_GPM_NOT_SUPPORTED
    assert len(fakelib.freed) == 2  # buffers released once GPM is off
    assert s.util_gpu == pytest.approx(0.97)


def test_transient_gpm_error_restarts_the_sample_pair(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    backend.sample(0)
    real_get = fakelib.replace("nvmlGpmSampleGet", lambda h, s: pynvml.NVML_ERROR_UNKNOWN)
    fakelib.clock.advance(0.5)
    failed = backend.sample(0)
    assert failed.sm_activity is None and "GPM read failed" in (failed.unavailable_reason("sm_activity") or "")
    fakelib.replace("nvmlGpmSampleGet", real_get)
    fakelib.clock.advance(0.5)
    assert backend.sample(0).unavailable_reason("sm_activity") == REASON_GPM_FIRST_SAMPLE
    fakelib.clock.advance(0.5)
    assert backend.sample(0).sm_activity == pytest.approx(0.5)


def test_gpu_lost_during_gpm_is_fatal(fakelib: FakeLib) -> None:
    backend = _open(fakelib)
    fakelib.replace("nvmlGpmSampleGet", lambda h, s: pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(GpuUnavailableError) as info:
        backend.sample(0)
    assert info.value.fatal
    with pytest.raises(GpuUnavailableError):
        backend.sample(0)


def test_old_driver_without_a_function_reports_driver_too_old(fakelib: FakeLib) -> None:
    fakelib.remove("nvmlDeviceGetPowerUsage")
    s = _open(fakelib).sample(0)
    assert s.power_w is None and "too old" in (s.unavailable_reason("power_w") or "")
