"""An interrupt at any send of the publisher's close still leaves the static dashboard (docs/spec.md section 18)."""

from __future__ import annotations

import json
import signal

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options
from trainmeter.widget.publisher import Publisher


class _Sends:
    """Counts every send of the close (state, history, message, display update); interrupts the ``at``-th."""

    def __init__(self, at: int | None, how: str = "raise"):
        self.at, self.how, self.count = at, how, 0

    def __call__(self) -> None:
        self.count += 1
        if self.count == self.at:
            if self.how == "signal":
                signal.raise_signal(signal.SIGINT)  # a real Ctrl-C: held back until the close is whole
            else:
                raise KeyboardInterrupt  # raised inside the send itself (the comm's write was cut)


class _Widget:
    store_key = "k1"

    def __init__(self, sends):
        self._sends, self._state, self._history = sends, {}, b""

    state = property(lambda self: self._state, lambda self, v: (self._sends(), setattr(self, "_state", v)))
    history = property(lambda self: self._history, lambda self, v: (self._sends(), setattr(self, "_history", v)))

    def send(self, content, buffers=None):
        self._sends()

    def _repr_mimebundle_(self, **kwargs):
        return {"text/plain": "trainmeter"}, {}


class _Handle:
    def __init__(self, sends):
        self._sends, self.updates = sends, []

    def update(self, data, metadata=None, raw=False):
        self._sends()
        self.updates.append(data)


def _close(run_root, sends):
    clock = FakeClock()
    m = make_monitor(make_options(run_dir=run_root, name="close"), clock=clock, text=False, probes=False,
                     extensions=[]).start()
    m.on_step(10)
    m.finish("completed")
    pub = Publisher(m.context, _Widget(sends), clock=clock)
    pub.handles = [_Handle(sends)]
    return m, pub


def _sends_in_a_whole_close(run_root) -> int:
    sends = _Sends(None)
    _, pub = _close(run_root / "count", sends)
    pub.close()
    return sends.count


@pytest.mark.parametrize("how", ["raise", "signal"])
def test_an_interrupt_at_every_send_of_the_close_still_leaves_the_static_dashboard(run_root, how):
    total = _sends_in_a_whole_close(run_root)
    assert total >= 3  # state, history, the display's update
    for at in range(1, total + 1):
        sends = _Sends(at, how)
        m, pub = _close(run_root / f"{how}{at}", sends)
        with pytest.raises(KeyboardInterrupt):
            pub.close()  # the interrupt is never swallowed, and comes once the close is whole
        (handle,) = pub.handles
        assert len(handle.updates) == 1 and "completed" in handle.updates[0]["text/plain"], (how, at)
        assert json.loads((m.run_dir / "dashboard.json").read_text())["status"] == "completed"
        assert pub.widget.state["status"] == "completed" and pub.widget.history
