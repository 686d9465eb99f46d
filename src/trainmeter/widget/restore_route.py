"""The kernel while a run is live (docs/protocol.md section 4): a reloaded page's widget restore goes to a subshell of
ours ("Reload while the cell runs"; private ipykernel 7 API: without it :func:`install` returns ``None``; any fault
forwards the message unchanged; host patch ``reload``), and its busy/idle status stays true while the run holds the
main shell (:func:`guard_status`: after an ``idle`` published off the main thread, ``busy`` again for the running cell
until the run ends; host patch ``status``). Any thread. Also the doctor's findings on kernel subshells and JupyterLab's
``commsOverSubshells`` setting (:func:`subshell_findings`)."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from trainmeter.core import host_patches
from trainmeter.core.fork_locks import fresh_in_child

RESTORE_REQUESTS = frozenset({"kernel_info_request", "comm_info_request"})
CONTROL_TARGET = "jupyter.widget.control"  # ipywidgets' restore comm (request_states)
COMM_MESSAGES = frozenset({"comm_msg", "comm_close"})
MAX_COMMS_KEPT = 256

_LOCK = threading.Lock()

fresh_in_child(globals(), "_LOCK")  # a forked child makes its own (core/fork_locks.py)


class RestoreRouter:
    """Decides which shell messages go to our subshell while ``active()``, and forwards them there (the rest to
    ``original``, the kernel's ``shell_channel_thread_main``). ``on_recv`` runs on ipykernel's shell-channel thread;
    ``add_comm`` any thread."""

    def __init__(self, active: Callable[[], bool], original: Callable[[Any], Any] | None = None,
                 kernel: Any = None) -> None:
        self.active = active
        self.original = original
        self.kernel = kernel
        self.comm_ids: set[str] = set()
        self.control_comm_ids: set[str] = set()
        self.diverted: Counter[str] = Counter()
        self.subshell_id: str | None = None
        self.stream: Any = None  # the shell stream whose callback install replaced
        self.loop: Any = None  # the shell-channel thread's IO loop (owns the stream)

    def uninstall(self) -> bool:
        """Give the kernel its own shell routing back and delete our subshell (on the shell-channel thread's loop);
        whether it was installed. Idempotent, never raises, any thread."""
        kernel, stream, loop = self.kernel, self.stream, self.loop
        if kernel is None or kernel_router(kernel) is not self:
            return False
        with suppress(Exception):
            del kernel._trainmeter_restore_router
        self.stream = self.loop = None

        def restore() -> None:
            with suppress(Exception):
                stream.on_recv(self.original, copy=False)
            subshell_id, self.subshell_id = self.subshell_id, None
            if subshell_id is not None:
                with suppress(Exception):  # already gone
                    kernel.shell_channel_thread.manager._delete_subshell(subshell_id)

        try:
            loop.add_callback(restore)
        except Exception:  # noqa: BLE001
            return False
        return True

    def add_comm(self, comm_id: str | None) -> None:
        """Route this comm's front-end messages to the subshell while a run is live. Any thread."""
        if comm_id:
            _remember(self.comm_ids, comm_id)

    def decide(self, header: dict[str, Any], content: Callable[[], dict[str, Any]]) -> bool:
        """Whether a message with ``header`` goes to our subshell (``content()`` unpacks it, lazily)."""
        if header.get("subshell_id") or not self.active():
            return False
        msg_type = header.get("msg_type")
        if msg_type in RESTORE_REQUESTS:
            return True
        if msg_type == "comm_open":
            body = content()
            if body.get("target_name") == CONTROL_TARGET and body.get("comm_id"):
                _remember(self.control_comm_ids, str(body["comm_id"]))
                return True
            return False
        if msg_type in COMM_MESSAGES:
            comm_id = content().get("comm_id")
            with _LOCK:
                return comm_id in self.comm_ids or comm_id in self.control_comm_ids
        return False

    async def on_recv(self, msg: list[Any]) -> None:
        """The shell stream's callback: ours to the subshell, the rest to the kernel's router."""
        try:
            routed = self._route(msg) if self.active() else None  # no run live: not even the header is read
        except Exception:
            routed = None
        if routed is None:
            await self.original(msg)  # type: ignore[misc]
            return
        socket, frames = routed
        socket.send_multipart(frames, copy=False)

    def _route(self, msg: list[Any]) -> tuple[Any, list[bytes]] | None:
        """``(subshell socket, re-addressed frames)`` for a message to divert, else ``None``."""
        kernel = self.kernel
        session = kernel.session
        if session is None:
            return None
        idents, rest = session.feed_identities(msg, copy=False)
        parsed = session.deserialize(rest, content=False, copy=False)
        header = parsed["header"]

        def content() -> dict[str, Any]:
            body = session.unpack(parsed["content"])
            return body if isinstance(body, dict) else {}

        if not self.decide(header, content):
            return None
        manager = kernel.shell_channel_thread.manager
        if self.subshell_id is None or self.subshell_id not in manager.list_subshell():
            self.subshell_id = manager._create_subshell()  # on the shell-channel thread, as ipykernel does
        socket = manager.get_shell_channel_to_subshell_socket(self.subshell_id)
        frames = readdress(session, idents, rest, self.subshell_id)
        self.diverted[str(header.get("msg_type"))] += 1
        return socket, frames


def _remember(ids: set[str], comm_id: str) -> None:
    with _LOCK:
        if len(ids) >= MAX_COMMS_KEPT:
            ids.clear()
        ids.add(comm_id)


def _bytes(frame: Any) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)


def readdress(session: Any, idents: list[Any], rest: list[Any], subshell_id: str) -> list[bytes]:
    """The wire frames of a message with ``subshell_id`` in its header, signed again (the header is in the HMAC);
    ``rest``: what follows the delimiter."""
    from jupyter_client.session import DELIM

    header = session.unpack(_bytes(rest[1]))
    header["subshell_id"] = subshell_id
    body = [session.pack(header)] + [_bytes(f) for f in rest[2:5]]
    return [_bytes(i) for i in idents] + [DELIM, session.sign(body)] + body + [_bytes(f) for f in rest[5:]]


def kernel_router(kernel: Any) -> RestoreRouter | None:
    """The router installed on ``kernel``, if any."""
    return getattr(kernel, "_trainmeter_restore_router", None)


def install(kernel: Any, active: Callable[[], bool]) -> RestoreRouter | None:
    """Wrap ``kernel``'s shell-channel routing once, on the thread that owns the stream (idempotent); ``None``
    without ipykernel 7 subshells."""
    existing = kernel_router(kernel)
    if existing is not None:
        existing.active = active
        return existing
    if not host_patches.allow("reload"):  # switched off, or ipykernel without the names it relies on
        return None
    try:
        if not getattr(kernel, "_supports_kernel_subshells", False):
            return None
        thread = kernel.shell_channel_thread
        manager = thread.manager  # created by now (the kernel started); fails loudly on an API change
        if not all(callable(getattr(manager, name, None))
                   for name in ("_create_subshell", "list_subshell", "get_shell_channel_to_subshell_socket")):
            return None
        stream, loop = kernel.shell_stream, thread.io_loop
        router = RestoreRouter(active, kernel.shell_channel_thread_main, kernel)
        router.stream, router.loop = stream, loop
        kernel._trainmeter_restore_router = router
        loop.add_callback(lambda: stream.on_recv(router.on_recv, copy=False))
    except Exception:
        return None
    return router


ATTR = "_publish_status"
START_GRACE_S = 10.0  # from install to the run's start (the widget's comm opens first: its idles count too)


class StatusGuard:
    """The wrapper of one kernel's ``_publish_status`` (``original``), while ``active()``; ``parent``: the running
    cell's ``execute_request``. It removes itself at the first status after the run's end, or :data:`START_GRACE_S`
    after the install when the run never went live."""

    def __init__(self, kernel: Any, original: Callable[..., Any], active: Callable[[], bool],
                 parent: dict[str, Any] | None) -> None:
        self.kernel = kernel
        self.original = original
        self.active = active
        self.parent = parent
        self.seen_active = False
        self.installed_at = time.monotonic()

    def __call__(self, status: Any, channel: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = self.original(status, channel, *args, **kwargs)
        with suppress(Exception):  # the kernel's own status was published above
            if self.active():
                self.seen_active = True
            elif self.seen_active or time.monotonic() - self.installed_at > START_GRACE_S:
                self.remove()  # the run is over (or never started): the kernel's own statuses from here on
                return result
            if status == "idle" and self.parent and threading.current_thread() is not threading.main_thread():
                self.original("busy", "shell", parent=self.parent)
        return result

    def remove(self) -> None:
        """Give the kernel its own method back (idempotent, any thread)."""
        with suppress(Exception):
            if self.kernel.__dict__.get(ATTR) is self:
                del self.kernel.__dict__[ATTR]


def guard_of(kernel: Any) -> StatusGuard | None:
    """The guard installed on ``kernel``, if any."""
    found = getattr(kernel, "__dict__", {}).get(ATTR)
    return found if isinstance(found, StatusGuard) else None


def guard_status(kernel: Any, active: Callable[[], bool]) -> StatusGuard | None:
    """Guard ``kernel``'s status for the run starting now on the main thread (idempotent: a guard already there
    takes the new run's parent); ``None`` when not installed. Never raises."""
    try:
        if threading.current_thread() is not threading.main_thread():
            return None  # a run on another thread leaves the main shell free: its status is true as it is
        parent = kernel.get_parent("shell")
        if not isinstance(parent, dict) or (parent.get("header") or {}).get("msg_type") != "execute_request":
            return None
        existing = guard_of(kernel)
        if existing is not None:
            existing.active, existing.parent = active, parent
            existing.seen_active, existing.installed_at = False, time.monotonic()
            return existing
        if not host_patches.allow("status"):
            return None
        original = getattr(kernel, ATTR, None)
        if not callable(original):
            return None
        guard = StatusGuard(kernel, original, active, parent)
        kernel._publish_status = guard
        return guard
    except Exception:  # noqa: BLE001
        return None


# -- the doctor's findings, from the files JupyterLab would read (a remote front end's are not visible); never raise
_LAB_SETTING = re.compile(r'"commsOverSubshells"\s*:\s*"([A-Za-z]+)"')
_MAX_SETTINGS_FILES = 200


def _lab_settings_files(env: Any) -> list[str]:
    """JupyterLab's user settings (``JUPYTERLAB_SETTINGS_DIR`` or ``~/.jupyter/lab/user-settings``) and overrides."""
    root = env.get("JUPYTERLAB_SETTINGS_DIR") or os.path.join(os.path.expanduser("~"), ".jupyter", "lab",
                                                               "user-settings")
    out = [os.path.join(sys.prefix, "share", "jupyter", "lab", "settings", "overrides.json")]
    for folder, _dirs, files in os.walk(root):
        out.extend(os.path.join(folder, f) for f in files if f.endswith(".jupyterlab-settings"))
        if len(out) > _MAX_SETTINGS_FILES:
            return out[:_MAX_SETTINGS_FILES]
    return out


def _lab_setting(paths: Sequence[str]) -> tuple[str, str] | None:
    """``(value, path)`` of the first ``commsOverSubshells`` set in ``paths``, or ``None``."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                match = _LAB_SETTING.search(fh.read(1_000_000))
        except OSError:
            continue
        if match:
            return match.group(1), path
    return None


def subshell_findings(version_of: Callable[[str], str | None], shell: Any, env: Any,
                      lab_settings: Sequence[str] | None) -> list[Any]:
    """Two findings: ``kernel subshells`` (ipykernel 7) and ``comms over subshells`` (JupyterLab's setting, searched
    in ``lab_settings``, default the user settings and this environment's overrides); ``version_of``: distribution
    name -> version or ``None``; ``env``: ``os.environ``."""
    from trainmeter.checkup import Check, major_version  # the doctor's (a live run's widget never loads it)

    version = version_of("ipykernel")
    major = major_version(version) if version else None
    kernel = getattr(shell, "kernel", None)
    info = getattr(kernel, "kernel_info", None)
    features = info.get("supported_features", ()) if isinstance(info, dict) else ()
    if version is None:
        sub = Check(name="kernel subshells", ok=None, detail="ipykernel not installed")
    elif major is not None and major >= 7:
        seen = "; this kernel advertises them" if "kernel subshells" in features else ""
        sub = Check(name="kernel subshells", ok=True, detail=f"ipykernel {version} supports kernel subshells{seen}")
    else:
        sub = Check(name="kernel subshells", ok=False if shell is not None else None,
                    detail=f"ipykernel {version} has no kernel subshells: widget messages wait while a cell runs",
                    fix="pip install 'ipykernel>=7', then restart the kernel")
    lab = version_of("jupyterlab")
    ok, fix = True, None
    if lab is None:
        ok, detail = None, "JupyterLab is not installed here (a remote front end's setting is not visible)"
    elif tuple(int(p) if p.isdigit() else 0 for p in [*lab.split("."), "0"][:2]) < (4, 4):
        ok, detail = None, f"JupyterLab {lab} predates comms over subshells (JupyterLab 4.4)"
    elif (found := _lab_setting(_lab_settings_files(env) if lab_settings is None else lab_settings)) is None:
        detail = (f"JupyterLab {lab}: commsOverSubshells not set here, so JupyterLab's default applies "
                  "(perCommTarget; jupyterlab#19719 proposes 'disabled')")
    elif found[0] == "disabled":
        ok, fix = False, "set commsOverSubshells to 'perCommTarget' in JupyterLab's settings"
        detail = (f"JupyterLab {lab}: commsOverSubshells is 'disabled' (in {found[1]}): widget messages wait while a "
                  "cell runs")
    else:
        detail = f"JupyterLab {lab}: commsOverSubshells is '{found[0]}' (in {found[1]})"
    return [sub, Check(name="comms over subshells", ok=ok, detail=detail, fix=fix)]
