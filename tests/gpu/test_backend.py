"""The backend seam's records and reason texts."""

from __future__ import annotations

import dataclasses

import pytest

from trainmeter.gpu.backend import (
    GPM_FIELDS,
    NUMERIC_FIELDS,
    REASON_DRIVER_TOO_OLD,
    REASON_NO_PERMISSION,
    REASON_NOT_SUPPORTED,
    GpuBackendResult,
    GpuDeviceInfo,
    GpuSample,
    GpuUnavailableError,
)


def test_sample_fields_default_to_none_not_sentinels() -> None:
    s = GpuSample(index=0, t_s=1.0)
    assert all(getattr(s, name) is None for name in NUMERIC_FIELDS)
    assert s.mig_gpm_reason is None and s.unavailable == ()


def test_sample_is_frozen() -> None:
    s = GpuSample(index=0, t_s=1.0, util_gpu=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.util_gpu = 0.9  # type: ignore[misc]


def test_unavailable_reason_finds_the_reason_for_a_field() -> None:
    s = GpuSample(index=0, t_s=0.0, unavailable=(("power_w", "power draw: not supported on this device"),))
    assert s.unavailable_reason("power_w") == "power draw: not supported on this device"
    assert s.unavailable_reason("util_gpu") is None


def test_numeric_fields_cover_units_suffixed_readings_and_gpm() -> None:
    assert "util_gpu" in NUMERIC_FIELDS and "nvlink_rx_bytes_per_s" in NUMERIC_FIELDS
    assert "mig_gpm" not in NUMERIC_FIELDS and "t_s" not in NUMERIC_FIELDS
    assert set(GPM_FIELDS) <= set(NUMERIC_FIELDS)
    assert len(GPM_FIELDS) == 9


def test_reason_helpers_name_the_reading() -> None:
    assert REASON_NOT_SUPPORTED.format("power draw") == "power draw: not supported on this device"
    assert "no permission" in REASON_NO_PERMISSION.format("GPM")
    assert "too old" in REASON_DRIVER_TOO_OLD.format("temperature")


def test_unavailable_error_carries_reason_and_fatality() -> None:
    err = GpuUnavailableError("lost", fatal=True)
    assert err.reason == "lost" and err.fatal and str(err) == "lost"


def test_backend_result_without_backend_holds_reason() -> None:
    result = GpuBackendResult(backend=None, reason="no driver")
    assert result.backend is None and result.reason == "no driver"
    info = GpuDeviceInfo(index=3, name="x", uuid="GPU-1")
    assert info.gpm_supported is False and info.reason is None
