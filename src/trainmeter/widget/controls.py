"""The widget's controls: the ``controls`` part of the state (buttons, alerts), and the front end's control messages
(docs/protocol.md section 5: obeyed only when naming this run's id and a known action). Any thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainmeter.widget.host import in_marimo

ACTIONS = ("stop", "checkpoint")
MAX_LISTED = 16
NO_MESSAGES = "this kernel reads widget messages only between cells (ipykernel 6, or no kernel subshells)"
NO_MESSAGES_MARIMO = ("marimo passes a widget's messages to Python only between cells and serves no file for a "
                      "control file: tm.stop() from another thread, or an --alert rule, still stops the run")
NO_FILE = "the run folder is not served for a control file"


def run_id(monitor: Any) -> str | None:
    """The id a control must name: the run folder's name (``None`` for a run kept in memory)."""
    run_dir = getattr(monitor, "run_dir", None)
    return Path(run_dir).name if run_dir is not None else None


def obey(monitor: Any, content: Any) -> bool:
    """Act on a front-end ``control`` message from this widget's comm; whether a live run took it (the widget's
    message handler guards the call)."""
    if not isinstance(content, dict) or content.get("kind") != "control":
        return False
    ident, action = run_id(monitor), content.get("action")
    if ident is None or content.get("run_id") != ident or action not in ACTIONS:
        return False
    return bool(getattr(monitor.controls, f"request_{action}")("button"))  # request_stop, request_checkpoint


def _message_path() -> tuple[bool, str | None]:
    """Whether this widget's messages reach the kernel while a cell runs, and why not (marimo: said by the
    publisher's marimo keyframes, as the publisher thread has no marimo context of its own)."""
    try:
        from trainmeter.widget.attach import live_publisher
        from trainmeter.widget.publisher import MARIMO_KEYFRAME_S

        publisher = live_publisher()
        if publisher is not None and getattr(publisher, "restore_router", None) is not None:
            return True, None
        marimo = in_marimo() or getattr(publisher, "keyframes", None) == MARIMO_KEYFRAME_S
        return False, NO_MESSAGES_MARIMO if marimo else NO_MESSAGES
    except Exception:
        return False, NO_MESSAGES


def controls_state(monitor: Any) -> dict[str, Any] | None:
    """The state's ``controls`` (docs/protocol.md): which path the buttons take, what is pending, what was done;
    ``None`` without controls or on a fault. Never raises."""
    try:
        controls = getattr(monitor, "controls", None)
        if controls is None:
            return None
        from trainmeter.widget.view_model import run_rel

        live = bool(controls.live())
        messages, reason = _message_path() if live else (False, None)
        run_dir = getattr(monitor, "run_dir", None)
        inside = run_rel(str(run_dir)) if run_dir is not None else None
        rel = served_rel(inside)  # the folder as the server serves it, or None
        # marimo: no Jupyter server to write a control file through
        control_file = f"{rel}/control.json" if rel and run_id(monitor) and reason != NO_MESSAGES_MARIMO else None
        path = "message" if messages else ("file" if control_file else None)
        if path is None and live and reason not in (None, NO_MESSAGES_MARIMO):
            why = "a hidden folder: run with --dir runs" if inside else "outside the notebook's folder"
            reason = f"{reason}; {NO_FILE} ({why})"
        stopped = controls.stopped
        alerts = getattr(monitor.extension("alerts"), "fired", ()) or ()
        return {
            "run_id": run_id(monitor), "live": live, "path": path, "reason": reason, "control_file": control_file,
            "pending": dict(zip(ACTIONS, controls.pending(), strict=True)),
            "stopped": {"by": stopped.by, "step": stopped.step} if stopped is not None else None,
            "checkpoints": [c.to_dict() for c in controls.checkpoints[-MAX_LISTED:]],
            "refused": [dict(r) for r in controls.refused[-MAX_LISTED:]],
            "alerts": [{k: a.get(k) for k in ("rule", "action", "step", "sentence", "notify")}
                       for a in alerts[-MAX_LISTED:]],
        }
    except Exception:  # a fault loses the buttons' state, never the view
        return None


def served_rel(run_rel: str | None) -> str | None:
    """``run_rel`` (``state["run_rel"]``) when Jupyter serves it as a link relative to the notebook (under the
    server's base URL); ``None`` outside the notebook's folder or in a hidden one (Jupyter serves none)."""
    if not run_rel:
        return None
    parts = str(run_rel).replace("\\", "/").split("/")
    if run_rel.startswith("/") or any(p == ".." or (p.startswith(".") and p != ".") for p in parts):
        return None
    return "/".join(parts)
