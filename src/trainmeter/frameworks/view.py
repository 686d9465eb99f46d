"""What the frameworks wing publishes: the control of the framework training now (``extension("frameworks")``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmeter.frameworks.control import FrameworkControl


@dataclass(frozen=True)
class FrameworksView:
    """The framework adapters at the time of asking (any thread).

    Attributes:
        control: Stop and save through the framework in its ``fit``/``train`` now, or ``None`` (none, or it ended).
        framework: The framework of the last ``fit``/``train`` seen (``"hf"``, ``"lightning"``, ``"keras"``,
            ``"fastai"``, ``"accelerate"``), or ``None``.
        steps_source: Where the step count comes from (``"torch.optim step hook"``,
            ``"keras optimizer updates ..."``, ...).
    """

    control: FrameworkControl | None = None
    framework: str | None = None
    steps_source: str = "torch.optim step hook"
