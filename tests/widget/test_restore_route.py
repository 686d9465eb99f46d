"""Which shell messages a live run sends to its subshell (restore_route.RestoreRouter.decide), and install's guards."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from trainmeter.widget.restore_route import CONTROL_TARGET, RestoreRouter, install, kernel_router


def _run(coro: Any) -> None:
    """Run ``coro`` to its end on a thread of its own (a test before may have left this thread's loop set)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    if errors:
        raise errors[0]


def _router(active: bool = True) -> RestoreRouter:
    return RestoreRouter(lambda: active)


def _decide(router: RestoreRouter, msg_type: str, content: dict[str, Any] | None = None,
            subshell_id: str | None = None) -> bool:
    return router.decide({"msg_type": msg_type, "subshell_id": subshell_id}, lambda: content or {})


def test_kernel_info_and_comm_info_go_to_the_subshell_while_a_run_is_live() -> None:
    router = _router()
    assert _decide(router, "kernel_info_request")
    assert _decide(router, "comm_info_request")


def test_nothing_is_diverted_when_no_run_is_live() -> None:
    router = _router(active=False)
    assert not _decide(router, "kernel_info_request")
    assert not _decide(router, "comm_open", {"target_name": CONTROL_TARGET, "comm_id": "c"})


def test_messages_already_addressed_to_a_subshell_keep_their_route() -> None:
    assert not _decide(_router(), "kernel_info_request", subshell_id="theirs")


def test_execute_and_other_requests_stay_on_the_main_shell() -> None:
    router = _router()
    for msg_type in ("execute_request", "complete_request", "inspect_request", "history_request",
                     "is_complete_request", "shutdown_request"):
        assert not _decide(router, msg_type), msg_type


def test_the_widget_control_comm_and_its_messages_are_diverted() -> None:
    router = _router()
    assert _decide(router, "comm_open", {"target_name": CONTROL_TARGET, "comm_id": "ctl"})
    assert _decide(router, "comm_msg", {"comm_id": "ctl", "data": {"method": "request_states"}})
    assert _decide(router, "comm_close", {"comm_id": "ctl"})


def test_other_widgets_comms_stay_on_the_main_shell() -> None:
    router = _router()
    assert not _decide(router, "comm_open", {"target_name": "jupyter.widget", "comm_id": "w"})
    assert not _decide(router, "comm_msg", {"comm_id": "a-user-slider", "data": {"method": "update"}})


def test_our_widgets_comm_messages_are_diverted_once_added() -> None:
    router = _router()
    assert not _decide(router, "comm_msg", {"comm_id": "ours"})
    router.add_comm("ours")
    assert _decide(router, "comm_msg", {"comm_id": "ours", "data": {"kind": "hello"}})


def test_content_is_only_unpacked_for_comm_messages() -> None:
    router = _router()
    unpacked: list[int] = []

    def content() -> dict[str, Any]:
        unpacked.append(1)
        return {}

    router.decide({"msg_type": "execute_request"}, content)
    router.decide({"msg_type": "kernel_info_request"}, content)
    assert unpacked == []


def test_install_without_subshell_support_returns_none() -> None:
    class OldKernel:  # ipykernel 6: no shell-channel thread
        pass

    assert install(OldKernel(), lambda: True) is None


def test_install_wraps_the_shell_stream_once_and_forwards_other_messages() -> None:
    forwarded: list[Any] = []

    async def original(msg: Any) -> None:
        forwarded.append(msg)

    class Stream:
        callback: Any = None

        def on_recv(self, callback: Any, copy: bool = True) -> None:
            self.callback = callback

    class Loop:
        def add_callback(self, fn: Any) -> None:
            fn()

    class Manager:
        def _create_subshell(self) -> str:
            return "s1"

        def list_subshell(self) -> list[str]:
            return []

        def get_shell_channel_to_subshell_socket(self, subshell_id: str) -> Any:
            return None

    class Thread:
        io_loop = Loop()
        manager = Manager()

    class Kernel:
        _supports_kernel_subshells = True
        shell_channel_thread = Thread()
        shell_stream = Stream()
        session = None
        shell_channel_thread_main = staticmethod(original)

    kernel = Kernel()
    router = install(kernel, lambda: True)
    assert router is not None and install(kernel, lambda: True) is router
    assert Kernel.shell_stream.callback == router.on_recv
    _run(router.on_recv(["frame"]))  # no session: unparsed, so forwarded unchanged
    assert forwarded == [["frame"]]


def test_in_a_real_kernel_a_reloaded_pages_restore_is_answered_while_the_cell_runs(tmp_path: Any) -> None:
    """ipykernel 7 end to end, as a page reloaded mid-cell talks (no subshell_id anywhere): kernel_info,
    the widget control comm's request_states, comm_info and our hello are answered before the cell ends;
    an execute request sent meanwhile still waits for the cell."""
    import queue
    import time
    import uuid

    jupyter_client = __import__("pytest").importorskip("jupyter_client.manager")
    __import__("pytest").importorskip("ipykernel")
    __import__("pytest").importorskip("anywidget")
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    got: dict[str, float] = {}
    try:
        kc.execute_interactive("%load_ext trainmeter", timeout=60)
        stop = tmp_path / "answered.stop"  # the cell runs until every answer came (at most 10 s)
        cell = ("%%trainmeter --name reload --interval 0.2\nimport os, time, trainmeter as tm\n"
                f"t_end = time.perf_counter() + 10\n"
                f"while time.perf_counter() < t_end and not os.path.exists({str(stop)!r}):\n"
                "    tm.emit(train_loss=1.0)\n    time.sleep(0.01)\n")
        cell_msg_id = kc.execute(cell)
        control_id = uuid.uuid4().hex
        widget_comm, sent, t0 = None, False, time.monotonic()
        ids: dict[str, str] = {"cell_reply": cell_msg_id}
        while time.monotonic() - t0 < 60:
            now = time.monotonic() - t0
            if widget_comm and not sent and now > 0.5:
                sent = True
                ids["kernel_info"] = kc.kernel_info()
                ids["comm_info"] = kc.comm_info(target_name="jupyter.widget")
                kc.shell_channel.send(kc.session.msg(
                    "comm_open", {"comm_id": control_id, "target_name": "jupyter.widget.control", "data": {}},
                    metadata={"version": "1.0.0"}))
                kc.shell_channel.send(kc.session.msg(
                    "comm_msg", {"comm_id": control_id, "data": {"method": "request_states"}}))
                kc.shell_channel.send(kc.session.msg(
                    "comm_msg", {"comm_id": widget_comm, "data": {"method": "custom", "content": {"kind": "hello"}}}))
                ids["execute"] = kc.execute("1 + 1")
            try:
                reply = kc.shell_channel.get_msg(timeout=0.02)
                for name, msg_id in ids.items():
                    if reply["parent_header"].get("msg_id") == msg_id:
                        got.setdefault(name, now)
            except queue.Empty:
                pass
            try:
                msg = kc.iopub_channel.get_msg(timeout=0.02)
            except queue.Empty:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "comm_open" and content["data"].get("state", {}).get("_model_name") == "AnyModel":
                widget_comm = content["comm_id"]
            elif kind == "comm_msg" and content.get("comm_id") == control_id:
                got.setdefault("update_states", now)
                assert widget_comm in content["data"]["states"]
            elif kind == "comm_msg" and content.get("comm_id") == widget_comm and sent:
                if (content["data"].get("content") or {}).get("kind") == "snapshot":
                    got.setdefault("snapshot", now)
            elif kind == "status" and content["execution_state"] == "idle" and \
                    msg["parent_header"].get("msg_id") == cell_msg_id:
                got["cell_end"] = now
            if all(name in got for name in ("kernel_info", "comm_info", "update_states", "snapshot")):
                stop.touch()  # everything the page asks during the cell is answered: the cell may end
            if "cell_end" in got and "execute" in got and "cell_reply" in got:
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    # compared within one channel (each is ordered): shell replies with the cell's execute_reply, iopub
    # messages with the cell's idle status
    for name in ("kernel_info", "comm_info"):
        assert got.get(name, float("inf")) < got["cell_reply"], (name, got)
    for name in ("update_states", "snapshot"):
        assert got.get(name, float("inf")) < got["cell_end"], (name, got)
    assert got["execute"] > got["cell_reply"], got  # user code never runs beside the cell


def test_with_no_run_live_every_message_is_forwarded_without_reading_it() -> None:
    forwarded: list[Any] = []

    async def original(msg: Any) -> None:
        forwarded.append(msg)

    reads: list[str] = []

    class Kernel:
        @property
        def session(self) -> Any:  # what _route reads first to parse a message
            reads.append("session")
            return None

    router = RestoreRouter(lambda: False, original, Kernel())
    _run(router.on_recv(["frame"]))
    assert forwarded == [["frame"]] and reads == [] and router.diverted == {}


def _fake_kernel() -> Any:
    """A kernel with ipykernel 7's shell-channel thread, stream and subshell manager (calls recorded)."""

    async def original(msg: Any) -> None:
        pass

    class Stream:
        callback: Any = None

        def on_recv(self, callback: Any, copy: bool = True) -> None:
            self.callback = callback

    class Loop:
        def add_callback(self, fn: Any) -> None:
            fn()

    class Manager:
        deleted: list[str] = []

        def _create_subshell(self) -> str:
            return "s1"

        def _delete_subshell(self, subshell_id: str) -> None:
            self.deleted.append(subshell_id)

        def list_subshell(self) -> list[str]:
            return []

        def get_shell_channel_to_subshell_socket(self, subshell_id: str) -> Any:
            return None

    class Thread:
        io_loop = Loop()
        manager = Manager()

    class Kernel:
        _supports_kernel_subshells = True
        shell_channel_thread = Thread()
        shell_stream = Stream()
        session = None
        shell_channel_thread_main = staticmethod(original)

    return Kernel()


def test_uninstall_gives_the_kernel_its_own_routing_back_and_deletes_our_subshell() -> None:
    kernel = _fake_kernel()
    router = install(kernel, lambda: True)
    assert router is not None and kernel.shell_stream.callback == router.on_recv
    router.subshell_id = "s1"  # created by a diverted restore
    assert router.uninstall()
    assert kernel.shell_stream.callback is kernel.shell_channel_thread_main
    assert kernel_router(kernel) is None and kernel.shell_channel_thread.manager.deleted == ["s1"]
    assert not router.uninstall()  # idempotent
    again = install(kernel, lambda: True)  # the next run installs afresh
    assert again is not None and again is not router and kernel.shell_stream.callback == again.on_recv
    again.uninstall()


def test_the_widgets_close_at_the_runs_end_uninstalls_the_router(run_root: Any) -> None:
    from trainmeter.core.clock import FakeClock
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options
    from trainmeter.widget.publisher import Publisher

    class Widget:
        state: Any = None
        history: Any = b""

        def send(self, content: Any, buffers: Any = None) -> None:
            pass

    kernel = _fake_kernel()
    router = install(kernel, lambda: True)
    clock = FakeClock(0.0)
    m = make_monitor(make_options(run_dir=run_root, name="rr"), clock=clock, text=False, probes=False)
    m.start()
    pub = Publisher(m.context, Widget(), clock=clock)
    pub.use_restore_router(router)
    m.on_step(8, loss_value=1.0)
    m.finish("completed")
    pub.close()
    assert kernel_router(kernel) is None and kernel.shell_stream.callback is kernel.shell_channel_thread_main
    assert pub.restores_seen() == 0  # the router's counts stay readable


def test_switched_off_the_kernel_is_left_alone(monkeypatch: Any) -> None:
    monkeypatch.setenv("TRAINMETER_DISABLE", "reload")
    kernel = _fake_kernel()
    assert install(kernel, lambda: True) is None and kernel.shell_stream.callback is None
