"""A publisher whose close never ran whole is closed after the next cell (docs/spec.md section 18)."""

from __future__ import annotations

import json

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget import attach
from trainmeter.widget.publisher import Publisher


class _Widget:
    store_key = "k1"
    state: dict = {}
    history = b""

    def send(self, content, buffers=None):
        pass

    def _repr_mimebundle_(self, **kwargs):
        return {"text/plain": "trainmeter"}, {}


class _Handle:
    def __init__(self):
        self.updates = []

    def update(self, data, metadata=None, raw=False):
        self.updates.append(data)


def _publisher(run_root):
    clock = FakeClock()
    m = make_monitor(make_options(run_dir=run_root, name="retry"), clock=clock, text=False, probes=False,
                     extensions=[]).start()
    m.on_step(10)
    pub = Publisher(m.context, _Widget(), clock=clock)
    pub.handles = [_Handle()]
    return m, pub


def test_a_close_that_never_ran_is_run_after_the_next_cell_and_the_hook_leaves(ip, run_root):
    m, pub = _publisher(run_root)
    attach.watch_close(pub)
    ip.run_cell("x = 1")  # the run is live: nothing is closed yet
    assert not pub.closed_whole
    m.finish("completed")  # the cell ended; a Ctrl-C kept its close from running
    ip.run_cell("x = 2")
    assert pub.closed_whole and len(pub.handles[0].updates) == 1
    assert json.loads((m.run_dir / "dashboard.json").read_text())["status"] == "completed"
    assert attach._after_cell not in ip.events.callbacks["post_run_cell"]


def test_a_close_that_completed_is_not_run_again(ip, run_root):
    m, pub = _publisher(run_root)
    attach.watch_close(pub)
    m.finish("completed")
    pub.close()
    ip.run_cell("x = 3")
    assert len(pub.handles[0].updates) == 1
    assert attach._after_cell not in ip.events.callbacks["post_run_cell"]
