"""The alerts wing's published view: the rules in force and the alerts that fired."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AlertsView:
    """What the widget and other wings read of the alerts wing (any thread): each rule as written back (``nan:stop``),
    and ``{rule, condition, action, step, t_s, sentence, notify[, where]}`` per fired alert, in order."""

    rules: tuple[str, ...]
    fired: tuple[dict[str, Any], ...]
