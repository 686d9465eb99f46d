"""Where the widget is shown: Jupyter's display or marimo's cell output (a fake marimo module stands in)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

import trainmeter as tm
from trainmeter.widget import host
from trainmeter.widget.attach import live_publisher
from trainmeter.widget.publisher import MARIMO_KEYFRAME_S, Publisher
from trainmeter.widget.widget import TrainmeterWidget

show_module = importlib.import_module("trainmeter.widget.show")


class ZMQInteractiveShell:
    pass


class TerminalInteractiveShell:
    pass


def _fake_marimo(monkeypatch: pytest.MonkeyPatch, *, running: bool = True) -> list[object]:
    """Install a fake ``marimo`` module; returns what its ``output.append`` received."""
    shown: list[object] = []
    fake = types.ModuleType("marimo")
    fake.running_in_notebook = lambda: running  # type: ignore[attr-defined]
    fake.output = types.SimpleNamespace(append=shown.append)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "marimo", fake)
    monkeypatch.setattr(host, "_SHOWN", host.deque(maxlen=host.MAX_MARIMO_WIDGETS_KEPT))
    return shown


def test_not_marimo_when_marimo_is_not_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "marimo", raising=False)
    assert host.in_marimo() is False
    assert "marimo" not in sys.modules  # the check imports nothing


def test_marimo_when_its_running_context_says_so(monkeypatch):
    _fake_marimo(monkeypatch, running=True)
    assert host.in_marimo() is True
    assert host.widget_host(ZMQInteractiveShell()) == host.MARIMO


def test_imported_marimo_outside_a_notebook_is_not_a_host(monkeypatch):
    _fake_marimo(monkeypatch, running=False)
    assert host.widget_host(TerminalInteractiveShell()) is None


def test_a_failing_marimo_check_means_not_marimo(monkeypatch):
    _fake_marimo(monkeypatch)

    def broken() -> bool:
        raise RuntimeError("no context")

    sys.modules["marimo"].running_in_notebook = broken  # type: ignore[attr-defined]
    assert host.in_marimo() is False


def test_jupyter_kernel_shell_is_the_jupyter_host(monkeypatch):
    monkeypatch.delitem(sys.modules, "marimo", raising=False)
    assert host.widget_host(ZMQInteractiveShell()) == host.JUPYTER
    assert host.widget_host(TerminalInteractiveShell()) is None


def test_show_in_marimo_outputs_the_widget_object_and_keeps_a_bounded_reference(monkeypatch):
    shown = _fake_marimo(monkeypatch)
    widgets = [object() for _ in range(host.MAX_MARIMO_WIDGETS_KEPT + 3)]
    for w in widgets:
        host.show_in_marimo(w)
    assert shown == widgets
    assert list(host._SHOWN) == widgets[-host.MAX_MARIMO_WIDGETS_KEPT:]


def test_monitor_with_widget_in_marimo_shows_a_live_widget_and_finishes_it(monkeypatch, run_root):
    shown = _fake_marimo(monkeypatch)
    with tm.monitor(name="mo", widget=True, run_dir=run_root) as m:
        assert m.text is False  # the widget replaces the text line
        publisher = live_publisher()
        assert isinstance(publisher, Publisher) and publisher.running
        assert publisher.keyframes == MARIMO_KEYFRAME_S  # its front end loads late and says no hello
    assert len(shown) == 1 and isinstance(shown[0], TrainmeterWidget)
    assert shown[0] is publisher.widget
    assert not publisher.running and publisher.handles == []  # no display handle to swap for the static view
    assert shown[0].state["status"] == "completed" and shown[0].history


def test_monitor_with_widget_in_a_script_prints_the_text_line_and_shows_nothing(monkeypatch, run_root):
    monkeypatch.delitem(sys.modules, "marimo", raising=False)
    monkeypatch.setattr(host, "ipython_shell", lambda: None)
    with tm.monitor(name="script", widget=True, run_dir=run_root) as m:
        assert m.text is True
        assert live_publisher() is None or not live_publisher().running


def test_display_of_a_saved_run_in_marimo_outputs_a_widget_holding_its_history(monkeypatch, run_root):
    with tm.monitor(name="saved", run_dir=run_root) as m:
        tm.emit(train_loss=1.0)
    shown = _fake_marimo(monkeypatch)
    show_module.display(m.run_dir)
    assert len(shown) == 1 and isinstance(shown[0], TrainmeterWidget)
    assert shown[0].state["name"] == "saved" and shown[0].state["status"] == "completed"
    assert shown[0].history  # the front end draws from it: marimo answers no hello while a cell runs


def test_display_of_the_finished_live_run_in_marimo_shows_the_same_widget_again(monkeypatch, run_root):
    shown = _fake_marimo(monkeypatch)
    with tm.monitor(name="again", widget=True, run_dir=run_root):
        pass
    show_module.display()
    assert len(shown) == 2 and shown[1] is shown[0]


def test_monitor_with_widget_in_a_jupyter_kernel_displays_the_widget_then_the_static_dashboard(monkeypatch, run_root):
    import IPython.display

    monkeypatch.delitem(sys.modules, "marimo", raising=False)
    monkeypatch.setattr(host, "ipython_shell", lambda: ZMQInteractiveShell())
    shown: list[dict] = []
    updated: list[dict] = []

    class Handle:
        def update(self, data, raw=False):
            updated.append(data)

    def fake_display(data, metadata=None, raw=False, display_id=None):
        shown.append(data)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", fake_display)
    with tm.monitor(name="lab", widget=True, run_dir=run_root) as m:
        assert m.text is False
    assert len(shown) == 1 and "application/vnd.jupyter.widget-view+json" in shown[0]
    assert len(updated) == 1 and "trainmeter-snapshot" in updated[0]["text/html"]
    assert "application/vnd.jupyter.widget-view+json" not in updated[0]
