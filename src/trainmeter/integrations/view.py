"""What the integration wing publishes: the control of the framework training now (``extension("frameworks")``;
the same control goes to ``monitor.controls.use_framework`` while its fit runs: docs/spec.md section 11)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class FrameworkControl:
    """Stop and save through the framework that is training (``name``: ``"hf"``, ...), holding its object weakly:
    ``stop_flag`` set on it (``""``: the adapter's callback stops), ``saver`` called with a path plus ``suffix``
    (``absolute``: as a Path). ``request_stop`` from any thread, ``save_checkpoint`` on the training thread."""

    def __init__(self, target: Any, name: str, *, saver: str = "", suffix: str = "", stop_flag: str = "",
                 can_stop: bool = True, absolute: bool = False) -> None:
        self._ref = weakref.ref(target)
        self.name, self.saver, self.suffix, self.stop_flag = name, saver, suffix, stop_flag
        self.can_stop, self.absolute = can_stop, absolute
        self.stop_requested = False

    def target(self) -> Any:
        """The framework object; ``RuntimeError`` when it is gone."""
        target = self._ref()
        if target is None:
            raise RuntimeError(f"the {self.name} object this control drove is gone")
        return target

    def request_stop(self) -> bool:
        """Ask the framework to end at its next step boundary through its own mechanism; ``False`` if it cannot."""
        if not self.can_stop:
            return False
        target = self.target()
        if self.stop_flag:
            setattr(target, self.stop_flag, True)
        self.stop_requested = True
        return True

    def save_checkpoint(self, dir_path: str, name: str) -> str | None:
        """Save through the framework's saver as ``name`` (``step-<n>``) plus its suffix inside ``dir_path``; the
        path it wrote (its own answer, else ours); ``None`` with no ``saver`` (trainmeter's own save then)."""
        if not self.saver:
            return None
        path = Path(dir_path) / f"{name}{self.suffix}"
        written = getattr(self.target(), self.saver)(path.absolute() if self.absolute else str(path))
        return str(written) if written is not None else str(path)


@dataclass(frozen=True, slots=True)
class FrameworkResume:
    """A framework's own resume, read at its start (docs/spec.md section 22): ``framework``, its own ``step`` count
    there (``None``: not read) with its ``provenance``, the ``path`` it resumed from (as given; ``None``: not read)
    and ``source`` (what was read where)."""

    framework: str
    step: int | None
    path: str | None
    provenance: str
    source: str


@dataclass(frozen=True)
class FrameworksView:
    """The framework adapters now (any thread): the ``control`` of the fit running, the last fit's and resume."""

    control: FrameworkControl | None = None
    framework: str | None = None
    resumed: FrameworkResume | None = None
