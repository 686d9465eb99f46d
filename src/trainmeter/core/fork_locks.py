"""Locks of ours that a forked child makes afresh: a thread of ours may hold one at the fork (docs/spec.md section 19)."""

from __future__ import annotations

import os
import threading
from typing import Any


def fresh_in_child(namespace: dict[str, Any], name: str) -> None:
    """Replace ``namespace[name]`` (a module's ``globals()``, read at each use) by a new lock in every forked child."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: namespace.__setitem__(name, threading.Lock()))
