"""A widget that takes what a publisher writes and keeps only the latest state and history (no comm, no browser)."""

from __future__ import annotations


class SilentWidget:
    """Stands in for ``TrainmeterWidget`` where a test reads the run, not the wire: ``state`` and ``history`` hold
    the last values written; custom messages go nowhere."""

    def __init__(self) -> None:
        self.state: dict = {}
        self.history = b""

    def send(self, content, buffers=None) -> None:
        pass
