"""The environment description: the same facts as ``platform``, read once per process."""

from __future__ import annotations

import platform

from trainmeter.record import passport
from trainmeter.record.passport import describe_environment, platform_name


def test_platform_name_matches_the_standard_library():
    assert platform_name() == platform.platform()


def test_host_facts_are_read_once_per_process_and_cuda_devices_at_each_call(monkeypatch):
    reads = []
    monkeypatch.setattr(passport, "_cpu_model", lambda: reads.append(1) or "a CPU")
    passport._host.cache_clear()
    try:
        first = describe_environment()
        second = describe_environment()
    finally:
        passport._host.cache_clear()
    assert reads == [1]
    assert first == second and first["cpu"] == "a CPU"
    assert set(first) == {"trainmeter", "python", "torch", "cuda", "cuda_devices", "platform", "cpu", "cpu_count"}
