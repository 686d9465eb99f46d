"""Imported at interpreter start by ``trainmeter-autostart.pth`` in a child of a monitored run.

The wheel (and the editable install) puts ``trainmeter-autostart.pth`` into
site-packages. Python's ``site`` runs its one line in every interpreter of that
environment; the line does nothing more than read two environment variables
unless ``TRAINMETER_RUN_DIR`` is set (a monitored parent exports it while its
run lasts) and ``TRAINMETER_AUTOSTART`` is not ``0``. Then it imports this
module, which imports trainmeter; the import arms
:mod:`trainmeter.ranks.autostart` (a wrapper of ``Optimizer.__init__`` and one
global optimizer step pre-hook, once ``torch.optim`` is imported), so a child
started by ``subprocess``, ``mp.spawn`` or ``!torchrun train.py`` records itself
as a rank of the parent's run from the optimizer it builds, with no change to its code. torch is not imported here.
A failed import is written once to stderr by the ``.pth`` line and the child
runs on unmonitored. Never raises.
"""

from __future__ import annotations

import trainmeter  # noqa: F401  (arms trainmeter.ranks.autostart: see trainmeter/__init__.py)

PTH_NAME = "trainmeter-autostart.pth"
