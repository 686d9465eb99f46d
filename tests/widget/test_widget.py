from __future__ import annotations

import pytest

pytest.importorskip("anywidget")

from tests.widget.wire_types import decode_frame  # noqa: E402
from trainmeter.widget.frame import SeriesColumns, encode_frame  # noqa: E402
from trainmeter.widget.widget import FALLBACK_ESM, HINT, TrainmeterWidget, allow_subshell_replies  # noqa: E402


def _recording(widget):
    sent = []
    widget.send = lambda content, buffers=None: sent.append((content, buffers))
    return sent


class _FakePublisher:
    def __init__(self, running=True):
        self.running = running
        self.requests = 0

    def request_snapshot(self):
        self.requests += 1


def _frame(seq=7):
    return encode_frame(seq, [SeriesColumns(name="train_loss", x_kind="step", xs=[1, 2], ys=[3.0, 2.5])])


def test_hello_without_a_live_publisher_sends_the_history_as_a_snapshot():
    w = TrainmeterWidget(state={"name": "r", "status": "completed"}, history=_frame(7))
    sent = _recording(w)
    w._handle_custom_msg({"kind": "hello"}, [])
    assert len(sent) == 1
    content, buffers = sent[0]
    assert content == {"kind": "snapshot", "seq": 7}
    frame = decode_frame(buffers[0])
    assert frame.seq == 7 and list(frame.series[0].ys) == [3.0, 2.5]


def test_hello_with_a_live_publisher_is_forwarded_to_it():
    w = TrainmeterWidget(history=_frame())
    sent = _recording(w)
    publisher = _FakePublisher(running=True)
    w.attach(publisher)
    w._handle_custom_msg({"kind": "hello"}, [])
    assert publisher.requests == 1 and sent == []
    publisher.running = False
    w._handle_custom_msg({"kind": "hello"}, [])
    assert publisher.requests == 1 and len(sent) == 1


def test_a_page_restored_while_the_run_is_live_reads_the_newest_whole_state():
    start = {"name": "r", "status": "starting", "rev": 0}
    w = TrainmeterWidget(state=start)
    publisher = _FakePublisher(running=True)
    publisher.live_state = {"name": "r", "status": "running", "rev": 7}  # the traitlet keeps the start's
    w.attach(publisher)
    assert w.get_state()["state"] == publisher.live_state and w.get_state("state")["state"]["rev"] == 7
    assert w.state == start and w.get_state("history") == {"history": b""}
    publisher.live_state = None  # the thread stopped: the traitlet (the final state, set at the close)
    assert w.get_state()["state"] == start


def test_hello_before_any_history_sends_nothing_and_other_messages_are_ignored():
    w = TrainmeterWidget()
    sent = _recording(w)
    w._handle_custom_msg({"kind": "hello"}, [])
    w._handle_custom_msg({"kind": "bogus"}, [])
    w._handle_custom_msg("not a dict", [])
    assert sent == []


def test_a_failing_send_does_not_raise_out_of_the_handler():
    w = TrainmeterWidget(history=_frame())

    def boom(content, buffers=None):
        raise RuntimeError("comm closed")

    w.send = boom
    w._handle_custom_msg({"kind": "hello"}, [])


def test_traits_are_synced_with_the_protocol_names_and_schema_version():
    w = TrainmeterWidget(state={"name": "r", "status": "running"})
    synced = set(w.keys)
    assert {"state", "history", "schema_version", "_esm"} <= synced
    assert w.schema_version == 2 and w.history == b""
    assert "default" in w._esm and "render" in w._esm


def test_fallback_esm_shows_the_text_line_status_and_step_and_names_the_missing_bundle():
    assert 'dataset.tm = "step"' in FALLBACK_ESM and 'dataset.tm = "status"' in FALLBACK_ESM
    assert "text_line" in FALLBACK_ESM and "static/widget.js" in FALLBACK_ESM
    assert "export default { render }" in FALLBACK_ESM


def test_text_repr_shows_the_text_line_and_how_to_get_the_dashboard():
    w = TrainmeterWidget(state={"name": "gpt", "status": "running", "text_line": "[step 12] loss=2.5"})
    text = repr(w)
    assert text.startswith("trainmeter: gpt [running] [step 12] loss=2.5")
    assert "pip install anywidget" in text and "trust" in text and "JupyterLab >= 4" in text
    data, _ = w._repr_mimebundle_()
    assert data["text/plain"] == text and "0x" not in text
    assert HINT in text


def test_subshell_override_is_installed_only_where_the_comm_supports_it():
    class Comm:
        def _reply_subshell_for(self, data, default):
            return "main"

    class Holder:
        comm = Comm()

    holder = Holder()
    assert allow_subshell_replies(holder) is True
    assert holder.comm._reply_subshell_for({}, "default-shell") == "default-shell"
    assert allow_subshell_replies(type("NoComm", (), {"comm": object()})()) is False
