"""Where the widget is shown: a Jupyter kernel (a display output) or a marimo notebook (the widget object appended
to the running cell's output); docs/architecture.md, "Where notebooks run". Imports nothing to detect. Cell's thread."""

from __future__ import annotations

import sys
from collections import deque
from contextlib import suppress
from typing import Any

JUPYTER = "jupyter"
MARIMO = "marimo"
MAX_MARIMO_WIDGETS_KEPT = 16
# marimo's output holds the widget's HTML, not the object: a widget no one references is collected and its
# comm closed (the view goes blank). The last few shown stay referenced here.
_SHOWN: deque[Any] = deque(maxlen=MAX_MARIMO_WIDGETS_KEPT)


def in_marimo() -> bool:
    """Whether this code runs in a marimo notebook's kernel (``marimo edit``, ``marimo run``, an export)."""
    with suppress(Exception):  # not imported (KeyError), or its check failed
        return bool(sys.modules["marimo"].running_in_notebook())
    return False


def ipython_shell() -> Any:
    """The running IPython shell, or ``None`` (without importing IPython when absent)."""
    with suppress(Exception):  # not imported (KeyError): no shell
        return sys.modules["IPython"].get_ipython()
    return None


def widget_host(shell: Any = None) -> str | None:
    """``"marimo"``, ``"jupyter"`` (an IPython kernel with a front end), or ``None`` (a script, a terminal)."""
    if in_marimo():
        return MARIMO
    shell = shell if shell is not None else ipython_shell()
    return JUPYTER if is_jupyter_shell(shell) else None


def is_jupyter_shell(shell: Any) -> bool:
    """Whether ``shell`` is an IPython kernel's (a front end draws widgets), not a terminal's."""
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def show_in_marimo(widget: Any) -> None:
    """Append ``widget`` to the running marimo cell's output and keep it referenced while it is shown."""
    import marimo

    _SHOWN.append(widget)
    marimo.output.append(widget)


def widget_sinks(monitor: Any) -> list[Any]:
    """Show a live widget for ``monitor`` and start its publisher; ``[]`` (text line on) when that fails. The
    sinks' ``close()`` must run when the run ends. Never raises."""
    try:
        from trainmeter.widget.attach import attach_widget
    except ImportError:
        return []
    try:
        return [attach_widget(monitor)]
    except Exception as exc:
        monitor.set_text(True)
        monitor.warn_once("widget", f"live widget unavailable, using the text line: {exc!r}")
        return []
