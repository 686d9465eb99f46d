"""Memory utilization (docs/spec.md section 4): peak allocated / device total on CUDA, RSS / host total on the CPU."""

from trainmeter.core.memory import MemoryProbe, utilization


def test_cuda_utilization_is_the_interval_peak_over_the_device_total():
    cuda = {"allocated_bytes": 10, "peak_allocated_bytes": 40, "reserved_bytes": 60, "device_total_bytes": 80}
    assert utilization(cuda, rss_bytes=5, host_total_bytes=100) == 0.5


def test_cpu_utilization_is_rss_over_host_total():
    assert utilization(None, rss_bytes=25, host_total_bytes=100) == 0.25
    assert utilization({"allocated_bytes": None, "reason": "no CUDA"}, rss_bytes=25, host_total_bytes=100) == 0.25


def test_a_missing_input_gives_none():
    assert utilization(None, rss_bytes=25, host_total_bytes=None) is None
    assert utilization({"allocated_bytes": 1, "peak_allocated_bytes": None, "device_total_bytes": 80}, 1, 2) is None


class _FakeCuda:
    available = True

    def sample_interval(self):
        return {"allocated_bytes": 2**30, "peak_allocated_bytes": 3 * 2**30, "reserved_bytes": 4 * 2**30,
                "device_total_bytes": 12 * 2**30}


def test_a_sample_carries_utilization_next_to_allocated_and_reserved():
    reading = MemoryProbe(_FakeCuda).sample()
    assert reading.utilization == 0.25
    assert reading.cuda["reserved_bytes"] == 4 * 2**30 and reading.cuda["allocated_bytes"] == 2**30
    assert reading.to_dict()["utilization"] == 0.25
