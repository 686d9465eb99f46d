"""Imported at interpreter start by ``trainmeter-autostart.pth`` in a child of a monitored run (docs/spec.md
section 19): importing trainmeter arms :mod:`trainmeter.ranks.autostart`. torch is not imported here.
"""

from __future__ import annotations

import trainmeter  # noqa: F401  (arms trainmeter.ranks.autostart: see trainmeter/__init__.py)
