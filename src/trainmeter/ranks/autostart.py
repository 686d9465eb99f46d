"""A child of a monitored run monitors itself as a rank from its first optimizer built (or stepped), finished when
the process ends (docs/spec.md section 19, "Children of a monitored cell"; ``TRAINMETER_AUTOSTART=0``: off).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.text import printable
from trainmeter.ranks.seating import PARENT_ENV, RUN_DIR_ENV, inherited_run_dir

AUTOSTART_ENV = "TRAINMETER_AUTOSTART"

_monitor: Any = None
_pid = 0


def auto_monitor() -> Any:
    """The monitor this process started on import, or ``None``."""
    return _monitor if _pid == os.getpid() else None


def arm() -> None:
    """Arm the start at the first optimizer built (or stepped) in a child of a monitored run (never raises)."""
    global _armed, _import_hooks, _refused
    if _armed or not os.environ.get(RUN_DIR_ENV) or os.environ.get(AUTOSTART_ENV, "1") == "0":
        return
    with contextlib.suppress(Exception):
        if not host_patches.enabled("autostart"):  # TRAINMETER_DISABLE=autostart (core/host_patches.py)
            return
        if inherited_run_dir() is None:  # unmarked: never written to (docs/spec.md section 19)
            if os.environ.get(PARENT_ENV) != str(os.getpid()) and not _refused:  # a child: said once a process
                _refused = True
                sys.stderr.write(f"trainmeter: this child is not recorded: {RUN_DIR_ENV}="
                                 f"{printable(os.environ[RUN_DIR_ENV])} is not the run folder of a monitored parent\n")
            return
        _armed = True
        module = sys.modules.get("torch.optim.optimizer")
        if module is not None:
            _register(module)
        else:
            from trainmeter.core.patches import PostImportHooks

            _import_hooks = PostImportHooks({"torch.optim.optimizer": _register})
            _import_hooks.install()


_armed = False
_refused = False  # an inherited folder no monitored parent marked: said once
_fired = False
_handle: Any = None
_import_hooks: Any = None
_patches: Any = None  # the wrapper of Optimizer.__init__ (core/patches.py), until the process ends


def _register(module: Any) -> None:
    global _handle, _patches
    if _handle is None:
        _handle = module.register_optimizer_step_pre_hook(_on_first_step)
    if _patches is None:
        from trainmeter.core.patches import Patches

        _patches = Patches()
        _patches.wrap(module.Optimizer, "__init__", _make_init)


def _make_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
        original(optimizer, *args, **kwargs)
        if not _fired:
            _start()  # its probes find this optimizer in the frames above (the subclass's __init__)

    return __init__


def _on_first_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _fired:
        _start()  # an optimizer built before the arming: found from the step's caller, from step 2


def give_way() -> None:
    """A ``tm.monitor()`` starts in this process: a run started here that has not stepped ends, leaving no trace."""
    global _monitor
    m = auto_monitor()
    if m is None or m.steps:
        return
    _monitor = None
    with contextlib.suppress(Exception):
        m.finish("completed")


def _start() -> None:
    global _fired, _monitor, _pid
    _fired = True
    with contextlib.suppress(Exception):
        from trainmeter.core import monitor as monitor_module
        from trainmeter.extensions import default_extensions, make_monitor
        from trainmeter.options import make_options
        from trainmeter.ranks import fork
        from trainmeter.ranks.extension import INTERVAL_ENV, NAME_ENV

        if monitor_module.active() is not None:
            return
        try:
            interval_s: Any = float(os.environ.get(INTERVAL_ENV, ""))
        except ValueError:
            interval_s = None
        options = make_options(name=os.environ.get(NAME_ENV) or "run", interval_s=interval_s, widget=False)
        out = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives as long as the process)
        m = make_monitor(options, text=False, out=out, extensions=default_extensions(options),
                         record=fork.LazyRankRecorder())
        m.start()
        _monitor, _pid = m, os.getpid()
        fork.install()
        fork.watch_exit()
        atexit.register(finish_from_exit, "completed", None)


def finish_from_exit(status: str, error: BaseException | None) -> None:
    """Finish the auto-started run as the process ends, and disarm (idempotent)."""
    global _handle
    m = auto_monitor()
    if m is not None:
        m.finish(status, error)
    if _handle is not None:
        with contextlib.suppress(Exception):
            _handle.remove()
        _handle = None
    if _import_hooks is not None:
        _import_hooks.remove()
    if _patches is not None:
        _patches.restore_all()
