"""The kernel's busy/idle status stays busy while a run holds the main shell (widget/restore_route.py guard_status)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from trainmeter.widget import restore_route

CELL = {"header": {"msg_type": "execute_request", "msg_id": "cell-1"}}
HELLO = {"header": {"msg_type": "comm_msg", "msg_id": "hello-1"}}
UNTRACKED = {"kernel_info_request", "comm_info_request"}  # jupyter_server's untracked_message_types (part)


class FakeKernel:
    """Records every status it publishes as ``(status, parent msg_id, parent msg_type)``."""

    def __init__(self, parent: dict[str, Any] | None = None) -> None:
        self.published: list[tuple[str, str, str]] = []
        self.parent = parent or CELL

    def get_parent(self, channel: str = "shell") -> dict[str, Any]:
        return self.parent

    def _publish_status(self, status: str, channel: str, parent: dict[str, Any] | None = None) -> None:
        header = (parent or self.parent)["header"]
        self.published.append((status, header["msg_id"], header["msg_type"]))


def _on_thread(fn: Any) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(timeout=10)


def shown(published: list[tuple[str, str, str]]) -> str | None:
    """What JupyterLab's status bar says after these: the last status of a tracked parent."""
    last = None
    for status, _, msg_type in published:
        if msg_type not in UNTRACKED:
            last = status
    return last


def test_an_idle_from_a_subshell_during_the_run_is_followed_by_busy_for_the_cell(monkeypatch: Any) -> None:
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    kernel = FakeKernel()
    kernel._publish_status("busy", "shell")  # the cell starts
    guard = restore_route.guard_status(kernel, lambda: True)
    assert guard is not None
    _on_thread(lambda: (kernel._publish_status("busy", "shell", HELLO), kernel._publish_status("idle", "shell", HELLO)))
    assert kernel.published[-2:] == [("idle", "hello-1", "comm_msg"), ("busy", "cell-1", "execute_request")]
    assert shown(kernel.published) == "busy"


def test_without_the_guard_the_status_bar_would_say_idle_mid_run() -> None:
    kernel = FakeKernel()
    kernel._publish_status("busy", "shell")
    _on_thread(lambda: kernel._publish_status("idle", "shell", HELLO))
    assert shown(kernel.published) == "idle"  # what the guard exists to undo


def test_statuses_of_the_main_thread_pass_unchanged(monkeypatch: Any) -> None:
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    kernel = FakeKernel()
    restore_route.guard_status(kernel, lambda: True)
    kernel._publish_status("idle", "shell")
    assert kernel.published == [("idle", "cell-1", "execute_request")]


def test_after_the_run_the_guard_removes_itself_and_the_kernels_method_is_back(monkeypatch: Any) -> None:
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    live = [True]
    kernel = FakeKernel()
    restore_route.guard_status(kernel, lambda: live[0])
    kernel._publish_status("busy", "shell")  # a status while live
    kernel.published.clear()
    live[0] = False
    _on_thread(lambda: kernel._publish_status("idle", "shell", HELLO))
    assert kernel.published == [("idle", "hello-1", "comm_msg")]
    assert restore_route.guard_of(kernel) is None and "_publish_status" not in kernel.__dict__


def test_idles_before_the_run_goes_live_are_undone_too(monkeypatch: Any) -> None:
    """The widget's comm opens before the publisher runs; the front end's create_subshell_request is answered then."""
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    live = [False]
    kernel = FakeKernel()
    guard = restore_route.guard_status(kernel, lambda: live[0])
    _on_thread(lambda: kernel._publish_status("idle", "control", {"header": {"msg_type": "create_subshell_request",
                                                                             "msg_id": "c"}}))
    assert shown(kernel.published) == "busy" and restore_route.guard_of(kernel) is guard
    live[0] = True
    _on_thread(lambda: kernel._publish_status("idle", "shell", HELLO))
    assert shown(kernel.published) == "busy"


def test_a_run_that_never_goes_live_lets_the_guard_go_after_the_grace(monkeypatch: Any) -> None:
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    kernel = FakeKernel()
    guard = restore_route.guard_status(kernel, lambda: False)
    assert guard is not None
    guard.installed_at -= restore_route.START_GRACE_S + 1
    _on_thread(lambda: kernel._publish_status("idle", "shell", HELLO))
    assert shown(kernel.published) == "idle" and restore_route.guard_of(kernel) is None


def test_install_is_idempotent_and_takes_the_new_cells_parent(monkeypatch: Any) -> None:
    monkeypatch.delenv("TRAINMETER_DISABLE", raising=False)
    kernel = FakeKernel()
    first = restore_route.guard_status(kernel, lambda: True)
    kernel.parent = {"header": {"msg_type": "execute_request", "msg_id": "cell-2"}}
    assert restore_route.guard_status(kernel, lambda: True) is first and first is not None
    assert first.parent["header"]["msg_id"] == "cell-2"


def test_not_installed_off_the_main_thread_outside_a_cell_or_when_switched_off(monkeypatch: Any) -> None:
    got: list[Any] = []
    _on_thread(lambda: got.append(restore_route.guard_status(FakeKernel(), lambda: True)))
    assert got == [None]
    outside = FakeKernel({"header": {"msg_type": "comm_msg", "msg_id": "x"}})
    assert restore_route.guard_status(outside, lambda: True) is None
    monkeypatch.setenv("TRAINMETER_DISABLE", "status")
    assert restore_route.guard_status(FakeKernel(), lambda: True) is None


@pytest.mark.slow
def test_in_a_real_kernel_the_status_stays_busy_while_the_widget_answers_during_the_cell(tmp_path: Any) -> None:
    """ipykernel 7 end to end: a %%trainmeter cell runs; the page's hello to our widget (answered on our
    subshell) and a create_subshell_request (the control thread, as JupyterLab sends one) each publish an
    idle of their own; the status a front end shows stays busy until the cell's own idle."""
    import queue
    import time

    jupyter_client = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    pytest.importorskip("anywidget")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    statuses: list[tuple[str, str, str]] = []
    try:
        kc.execute_interactive("%load_ext trainmeter", timeout=60)
        stop = tmp_path / "answered.stop"  # the cell runs until the hello's idle was followed by busy (at most 10 s)
        cell = ("%%trainmeter --name status --interval 0.2\nimport os, time, trainmeter as tm\n"
                "t_end = time.perf_counter() + 10\n"
                f"while time.perf_counter() < t_end and not os.path.exists({str(stop)!r}):\n"
                "    tm.emit(train_loss=1.0)\n    time.sleep(0.01)\n")
        cell_id = kc.execute(cell)
        widget_comm, sent, asked, t0, ended = None, False, False, time.monotonic(), False
        while time.monotonic() - t0 < 60 and not ended:
            if widget_comm and not asked:  # as JupyterLab does the moment the comm opens (before the run is live)
                asked = True
                kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
            if widget_comm and not sent and time.monotonic() - t0 > 0.5:
                sent = True
                kc.shell_channel.send(kc.session.msg(
                    "comm_msg", {"comm_id": widget_comm, "data": {"method": "custom", "content": {"kind": "hello"}}}))
            try:
                msg = kc.iopub_channel.get_msg(timeout=0.05)
            except queue.Empty:
                continue
            kind, content, parent = msg["msg_type"], msg["content"], msg["parent_header"]
            if kind == "comm_open" and content["data"].get("state", {}).get("_model_name") == "AnyModel":
                widget_comm = content["comm_id"]
            elif kind == "status":
                statuses.append((content["execution_state"], parent.get("msg_id", ""), parent.get("msg_type", "")))
                ended = content["execution_state"] == "idle" and parent.get("msg_id") == cell_id
                hello_idle = next((i for i, st in enumerate(statuses) if st[0] == "idle" and st[2] == "comm_msg"), None)
                if hello_idle is not None and ("busy", cell_id, "execute_request") in statuses[hello_idle + 1:]:
                    stop.touch()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert ended and sent, statuses
    start = statuses.index(("busy", cell_id, "execute_request"))
    during = statuses[start:-1]  # up to, not including, the cell's own idle
    foreign_idles = [s for s in during if s[0] == "idle" and s[1] != cell_id and s[2] not in UNTRACKED]
    assert foreign_idles, statuses  # the hello and the subshell request did publish idles
    assert shown(during) == "busy", statuses
    for i, s in enumerate(during):
        if s in foreign_idles:
            assert ("busy", cell_id, "execute_request") in during[i + 1:], statuses
