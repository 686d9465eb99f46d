"""A child of a monitored run monitors itself as a rank, once it trains.

``mp.spawn`` children, ``subprocess`` and ``!torchrun`` workers start fresh
interpreters: nothing of the parent's monitor survives. The parent exports
``TRAINMETER_RUN_DIR``; when such a child imports trainmeter (its code does, or
``trainmeter-autostart.pth``, installed into site-packages with trainmeter, does
it at interpreter start: :mod:`trainmeter.ranks.site_hook`), :func:`arm` registers one global optimizer
step *pre*-hook (after ``torch.optim`` is imported). At the child's first
optimizer step, if no run is monitored in it, a monitor starts there (its probes
and timing hooks go into the *post*-hook table, so no table is changed while
torch iterates it), with a :class:`~trainmeter.ranks.recorder.LazyRankRecorder`:
it seats itself as ``rank-<k>/`` of the parent's run at its first report, prints
nothing, and is finished when the process ends (a ``multiprocessing`` finalizer,
else ``atexit``). That first step is counted; its tokens are not (the trained
model is found from the next one). A ``tm.monitor()`` in the child starts
before any step and is seated the same way; the hook then never starts
another. ``TRAINMETER_AUTOSTART=0`` turns it off.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from trainmeter.core import host_patches
from trainmeter.ranks.launch import RUN_DIR_ENV, inherited_run_dir

AUTOSTART_ENV = "TRAINMETER_AUTOSTART"

_monitor: Any = None
_pid = 0


def auto_monitor() -> Any:
    """The monitor this process started on import, or ``None``."""
    return _monitor if _pid == os.getpid() else None


def arm() -> None:
    """Arm the first-step start when this process is a child of a monitored run (never raises)."""
    global _armed
    if _armed or not os.environ.get(RUN_DIR_ENV) or os.environ.get(AUTOSTART_ENV, "1") == "0":
        return
    try:
        if not host_patches.enabled("autostart"):  # TRAINMETER_DISABLE=autostart (core/host_patches.py)
            return
        if inherited_run_dir() is None:
            return
        _armed = True
        module = sys.modules.get("torch.optim.optimizer")
        if module is not None:
            _register(module)
        else:
            from trainmeter.core.patches import PostImportHooks

            global _import_hooks
            _import_hooks = PostImportHooks({"torch.optim.optimizer": _register})
            _import_hooks.install()
    except Exception:
        return


_armed = False
_fired = False
_handle: Any = None
_import_hooks: Any = None


def _register(module: Any) -> None:
    global _handle
    if _handle is None:
        _handle = module.register_optimizer_step_pre_hook(_on_first_step)


def _on_first_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    global _fired, _monitor, _pid
    if _fired:
        return
    _fired = True
    try:
        from trainmeter.core import monitor as monitor_module

        if monitor_module._ACTIVE is not None:
            return
        m = _make()
        m.start()
        _monitor, _pid = m, os.getpid()
        from trainmeter.ranks import fork

        fork.install()
        fork.watch_exit()
        atexit.register(finish_from_exit, "completed", None)
    except Exception:
        return


def _make() -> Any:
    from trainmeter.extensions import default_extensions, make_monitor
    from trainmeter.options import make_options
    from trainmeter.ranks.extension import INTERVAL_ENV, NAME_ENV
    from trainmeter.ranks.recorder import LazyRankRecorder
    from trainmeter.record.recorder import RunRecorder

    try:
        interval_s: Any = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        interval_s = None
    options = make_options(name=os.environ.get(NAME_ENV) or "run", interval_s=interval_s, widget=False)
    out = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives as long as the process)
    return make_monitor(options, text=False, out=out, extensions=default_extensions(options),
                        record=LazyRankRecorder(RunRecorder()))


def finish_from_exit(status: str, error: BaseException | None) -> None:
    """Finish the auto-started run as the process ends, and disarm (idempotent)."""
    global _handle
    m = auto_monitor()
    if m is not None:
        m.finish(status, error)
    if _handle is not None:
        try:
            _handle.remove()
        except Exception:
            pass
        _handle = None
    if _import_hooks is not None:
        _import_hooks.remove()
