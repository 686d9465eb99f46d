"""Opening the GPU backend for a run: the devices chosen, why there is none, a bad --gpus closes it."""

from __future__ import annotations

import pytest

from tests.fakes.gpu.fake import FakeNvml, fake_uuid, open_fake
from trainmeter.core.clock import FakeClock
from trainmeter.gpu.sampler import open_for_run


def test_the_cuda_context_devices_are_chosen_and_read_only_once_the_backend_is_open():
    fake = FakeNvml(["h100_sxm", "h100_sxm"], clock=FakeClock(0.0))
    calls = []

    def uuids():
        calls.append(fake.closed)
        return [fake_uuid(1)]

    opened = open_for_run(None, clock=FakeClock(0.0), open_backend=lambda clock: open_fake(fake), cuda_uuids=uuids,
                          env={})
    assert opened.backend is fake and opened.selection.indices == (1,) and calls == [False]


def test_without_a_backend_the_reason_is_kept_and_nothing_is_selected():
    opened = open_for_run(None, clock=FakeClock(0.0), open_backend=lambda clock: open_fake(failure="no_devices"),
                          cuda_uuids=None, env={})
    assert opened.backend is None and opened.selection is None and "no" in (opened.reason or "").lower()


def test_a_gpus_value_naming_no_device_here_closes_the_backend_and_raises():
    fake = FakeNvml(["h100_sxm"], clock=FakeClock(0.0))
    with pytest.raises(ValueError, match="no GPU 3"):
        open_for_run("3", clock=FakeClock(0.0), open_backend=lambda clock: open_fake(fake), cuda_uuids=None, env={})
    assert fake.closed
