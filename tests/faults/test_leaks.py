"""Item 10 (comms): a kernel running many monitored cells keeps the comms of one finished widget, not all."""

from __future__ import annotations

import pytest

from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def test_two_hundred_widget_cells_leave_only_the_last_widgets_comms(run_root, monkeypatch):
    pytest.importorskip("anywidget")
    import IPython.display
    from ipywidgets.widgets.widget import _instances

    from trainmeter.widget import attach as attach_module

    class Handle:
        def update(self, data, metadata=None, raw=False):
            pass

    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: Handle())
    before = len(_instances)
    for i in range(200):
        m = make_monitor(make_options(run_dir=run_root, name=f"c{i}"), text=False, probes=False, extensions=[])
        pub = attach_module.attach_widget(m.context)
        m.start()
        m.on_step(1)
        m.finish("completed")
        pub.close()
    assert len(_instances) - before <= 2  # the last widget and its layout: tm.display() can still show it
    assert attach_module.live_publisher() is pub
