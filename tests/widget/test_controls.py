"""The widget's controls: the state's ``controls`` and the front end's ``control`` messages (docs/protocol.md)."""

from __future__ import annotations

import pytest

from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget import controls as wc


@pytest.fixture
def run(run_root):
    m = make_monitor(make_options(run_dir=run_root, widget=False), extensions=[], text=False, probes=False).start()
    yield m
    if m.status == "running":
        m.finish("completed")


def test_a_control_message_is_obeyed_only_for_this_run_and_a_known_action(run):
    ident = run.run_dir.name
    assert not wc.obey(run, {"kind": "control", "action": "stop", "run_id": "another"})
    assert not wc.obey(run, {"kind": "control", "action": "__import__('os')", "run_id": ident})
    assert not wc.obey(run, {"kind": "hello"}) and not wc.obey(run, "stop") and not wc.obey(None, {})
    assert run.controls.pending() == (None, None)
    assert wc.obey(run, {"kind": "control", "action": "checkpoint", "run_id": ident})
    assert wc.obey(run, {"kind": "control", "action": "stop", "run_id": ident})
    assert run.controls.pending() == ("button", "button")


def test_a_finished_run_takes_no_control(run):
    run.finish("completed")
    assert not wc.obey(run, {"kind": "control", "action": "stop", "run_id": run.run_dir.name})


def test_without_a_subshell_the_state_names_the_file_path_or_why_the_buttons_are_off(run, monkeypatch):
    monkeypatch.setattr(wc, "_message_path", lambda: (False, wc.NO_MESSAGES))
    state = wc.controls_state(run)
    assert state["live"] and state["run_id"] == run.run_dir.name
    # run_root is outside the working folder: not served, so neither path reaches the run
    assert state["path"] is None and wc.NO_MESSAGES in state["reason"] and wc.NO_FILE in state["reason"]
    assert state["reason"].endswith("(outside the notebook's folder)")
    hidden = run.run_dir.parent.parent / ".tm"
    hidden.mkdir()
    monkeypatch.chdir(hidden.parent)  # the run under a hidden folder of the notebook's: the server refuses it
    shown = run.run_dir
    run.set_run_dir(hidden / "runs" / shown.name)
    assert wc.controls_state(run)["reason"].endswith("(a hidden folder: run with --dir runs)")
    run.set_run_dir(shown)
    monkeypatch.undo()
    monkeypatch.setattr(wc, "_message_path", lambda: (False, wc.NO_MESSAGES))
    monkeypatch.chdir(run.run_dir.parent.parent)  # the run folder is now under the notebook's folder
    state = wc.controls_state(run)
    assert state["path"] == "file" and state["control_file"].endswith(f"{run.run_dir.name}/control.json")
    monkeypatch.setattr(wc, "_message_path", lambda: (True, None))
    assert wc.controls_state(run)["path"] == "message"


def test_the_state_lists_what_is_pending_and_what_was_done(run):
    run.controls.request_stop("button")
    state = wc.controls_state(run)
    assert state["pending"] == {"stop": "button", "checkpoint": None}
    assert state["stopped"] is None and state["checkpoints"] == [] and state["alerts"] == []



def test_in_marimo_the_buttons_reason_says_what_marimo_lacks_not_ipykernel(run, monkeypatch):
    from trainmeter.widget import attach
    from trainmeter.widget.publisher import MARIMO_KEYFRAME_S

    marimo_publisher = type("P", (), {"restore_router": None, "keyframes": MARIMO_KEYFRAME_S})()
    monkeypatch.setattr(attach, "live_publisher", lambda: marimo_publisher)  # on the publisher thread: no context
    monkeypatch.chdir(run.run_dir.parent.parent)  # served by a Jupyter server, were there one
    state = wc.controls_state(run)
    assert state["path"] is None and state["control_file"] is None and state["reason"] == wc.NO_MESSAGES_MARIMO
    assert "ipykernel" not in state["reason"] and "marimo passes a widget's messages" in state["reason"]
