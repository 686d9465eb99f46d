"""The live dashboard widget: the traitlets of docs/protocol.md section 1. Imports anywidget: loaded lazily, never by
``import trainmeter``."""

from __future__ import annotations

import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from trainmeter.widget.controls import obey
from trainmeter.widget.frame import frame_seq

ESM_PATH = Path(__file__).parent.parent / "static" / "widget.js"
CSS_PATH = ESM_PATH.with_name("widget.css")
SCHEMA_VERSION = 2

HINT = ("(the live dashboard is not shown here. In Jupyter it needs the widget front end: `pip install anywidget`, "
        "then restart the kernel and reload the page; trust the notebook (`jupyter trust NOTEBOOK.ipynb`); use "
        "JupyterLab >= 4 or Notebook >= 7. The run folder holds the full record either way.)")

FALLBACK_ESM = (Path(__file__).parent / "fallback.js").read_text(encoding="utf-8")  # status, step, text line


def allow_subshell_replies(widget: Any) -> bool:
    """Let front-end messages for ``widget`` be answered in a kernel subshell during a busy cell (docs/protocol.md
    section 4; a private ipykernel 7 hook); whether the override was installed."""
    comm = getattr(widget, "comm", None)
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        with suppress(Exception):
            comm._reply_subshell_for = lambda data, default: default
            return True
    return False


class TrainmeterWidget(anywidget.AnyWidget):
    """The trainmeter dashboard. Written by one thread at a time: the publisher while a run is live, the caller
    otherwise; the ``hello`` handler (maybe on a kernel subshell) only asks the publisher, or sends ``history``."""

    _esm = ESM_PATH if ESM_PATH.is_file() else FALLBACK_ESM
    if CSS_PATH.is_file():
        _css = CSS_PATH

    state = traitlets.Dict().tag(sync=True)
    history = traitlets.Bytes(b"").tag(sync=True)
    schema_version = traitlets.Int(SCHEMA_VERSION).tag(sync=True)
    store_key = traitlets.Unicode().tag(sync=True)  # per-widget id: the front end's store key
    # {"model_id", "cell_id"}: where a page reloaded during the run puts the view (js/src/reattach.ts)
    output_ref = traitlets.Dict().tag(sync=True)

    def __init__(self, *, state: dict[str, Any] | None = None, history: bytes = b"", **kwargs: Any) -> None:
        kwargs.setdefault("store_key", uuid.uuid4().hex)
        super().__init__(state=state or {"name": "run", "status": "starting"}, history=history, **kwargs)
        self._publisher: Any = None  # the live run's publisher: running, live_state, request_snapshot, monitor
        self.on_msg(self._on_front_message)
        allow_subshell_replies(self)

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced traits' values; while a run is live, ``state`` is the publisher's newest (what a restored page
        reads: the traitlet holds the start's state until the end)."""
        state = super().get_state(key, drop_defaults)
        if "state" in state:
            live = getattr(getattr(self, "_publisher", None), "live_state", None)  # None while __init__ runs
            if live is not None:
                state["state"] = live
        return state

    def attach(self, publisher: Any) -> None:
        """Forward ``hello`` to ``publisher`` (``None`` to answer from ``history``)."""
        self._publisher = publisher

    def _on_front_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A ``hello`` is answered by a ``snapshot`` (from ``history``, or by the live publisher's next tick); a
        ``control`` goes to widget/controls.py (stop, checkpoint)."""
        with suppress(Exception):  # a front-end message must never break the kernel side
            kind, publisher = content.get("kind") if isinstance(content, dict) else None, self._publisher
            if kind == "hello" and publisher is not None and publisher.running:
                publisher.request_snapshot()
            elif kind == "hello" and (frame := bytes(self.history or b"")):
                self.send({"kind": "snapshot", "seq": frame_seq(frame)}, buffers=[frame])
            elif kind == "control":
                obey(getattr(publisher, "monitor", None), content)

    def __repr__(self) -> str:  # the current text line, where the widget cannot show
        s = self.state or {}
        line = f"trainmeter: {s.get('name', 'run')} [{s.get('status', '?')}] {s.get('text_line') or ''}".rstrip()
        return f"{line}\n{HINT}"
