"""A node sampler without its thread, for tests that step it by hand in step with a fake clock."""

from __future__ import annotations

from typing import Any

from trainmeter.host.extension import NodeSampler


class SteppedNodeSampler(NodeSampler):
    """:class:`~trainmeter.host.extension.NodeSampler` whose start opens the source and takes the baseline on the
    calling thread and starts no thread; the test calls :meth:`step`."""

    def start(self, monitor: Any) -> None:
        self._monitor = monitor
        if self._open(monitor):
            self.step(monitor.clock())
