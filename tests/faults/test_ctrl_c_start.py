"""Issue 40 item 5: a Ctrl-C at any moment of a run's start reaches the user as their KeyboardInterrupt.

The interrupt is injected on the training thread at sampled lines of trainmeter's own code run by
``tm.monitor``'s ``__enter__`` (a trace function that raises once), and inside ``Thread.start`` of each thread
of ours (after the OS thread began, before ``start`` saw it run: where a real Ctrl-C cut the start). Each time the
exception is the user's KeyboardInterrupt, never a RuntimeError of ours, and no thread of ours, patch or slot is left.

The trace raises only where a real Ctrl-C can raise. It passes over three kinds of line event. One is a with-block's
exit: a real signal is raised where the interpreter checks for one (a call's return, a backward jump, a Python
function's entry), never between the block's last statement and its ``__exit__`` call, but on every Python 3.10-3.13
that line event comes there, outside the block's protection, so raising at it leaves a lock held. Another is a
``try:`` line's ``NOP``, which checks for no signal and which CPython 3.13 leaves outside the enclosing with-block's
protection. The last is any line while a SIGINT handler of ours holds Ctrl-C back (there a Ctrl-C is held, never
raised).
"""

from __future__ import annotations

import dis
import signal
import sys
import threading
import time

import pytest

import trainmeter as tm
from tests.faults.conftest import assert_left_nothing

_OURS = "/trainmeter/"
_ENTERING = threading.Event()  # inside the block's __enter__ (the start)
_WITH_EXITS: dict[object, frozenset[int]] = {}
_PASS_OVER = {"SWAP", "NOP", "POP_BLOCK", "COPY", "ROT_TWO"}


def _at_with_exit(frame) -> bool:
    """Whether a line event is a with-block's exit: the next instructions call ``__exit__(None, None, None)``
    (``LOAD_CONST None`` twice; 3.10: ``LOAD_CONST None, DUP_TOP``), after at most a stack shuffle."""
    code = frame.f_code
    exits = _WITH_EXITS.get(code)
    if exits is None:
        seq = list(dis.get_instructions(code))
        found = set()
        for i, first in enumerate(seq):
            j = i
            while j < len(seq) - 2 and seq[j].opname in _PASS_OVER:
                j += 1
            a, b = seq[j], seq[min(j + 1, len(seq) - 1)]
            if a.opname == "LOAD_CONST" and a.argval is None and (
                    b.opname == "DUP_TOP" or (b.opname == "LOAD_CONST" and b.argval is None)):
                found.add(first.offset)
        exits = _WITH_EXITS[code] = frozenset(found)
    return frame.f_lasti in exits


def _can_raise(frame) -> bool:
    """Whether a real Ctrl-C could raise KeyboardInterrupt at this line event (see the module docstring)."""
    if _at_with_exit(frame) or frame.f_code.co_code[frame.f_lasti] == dis.opmap["NOP"]:
        return False
    handler = signal.getsignal(signal.SIGINT)
    return not (getattr(handler, "__module__", None) or "").startswith("trainmeter")


def _enter(run_root, name: str, trace=None, **flags):
    """Enter a monitored block under ``trace`` and leave it; what came out of the entry (None: nothing)."""
    block = tm.monitor(run_dir=run_root, name=name, interval_s=60.0, **flags)
    _ENTERING.set()
    sys.settrace(trace)
    try:
        block.__enter__()
    except BaseException as exc:  # noqa: BLE001 (the test looks at what came out)
        return exc
    finally:
        sys.settrace(None)
        _ENTERING.clear()
    block.__exit__(None, None, None)
    return None


def _count_lines(run_root) -> int:
    seen = 0

    def trace(frame, event, arg):
        nonlocal seen
        if event == "line" and _can_raise(frame):
            seen += 1
        return trace

    def global_trace(frame, event, arg):
        return trace if _OURS in frame.f_code.co_filename else None

    assert _enter(run_root, "count", global_trace) is None
    return seen


def _raise_at_line(k: int):
    seen = 0

    def trace(frame, event, arg):
        nonlocal seen
        if event == "line" and _can_raise(frame):
            seen += 1
            if seen == k:
                sys.settrace(None)
                raise KeyboardInterrupt
        return trace

    def global_trace(frame, event, arg):
        return trace if _OURS in frame.f_code.co_filename else None

    return global_trace


def _settle() -> None:
    deadline = time.monotonic() + 2.0  # a thread told to stop ends within its own short join
    while time.monotonic() < deadline and any(t.name.startswith("trainmeter") for t in threading.enumerate()):
        time.sleep(0.01)


@pytest.mark.monitor_warns("^(?!.*cannot join)")  # an interrupt inside a wing's start disables it, said once
@pytest.mark.parametrize("signals", ["held", "off"])
def test_ctrl_c_at_any_line_of_the_start_is_the_users_keyboard_interrupt(run_root, patch_points, signals,
                                                                         monkeypatch):
    if signals == "off":  # TRAINMETER_DISABLE=signals: no handler of ours holds Ctrl-C back, it can raise anywhere
        monkeypatch.setenv("TRAINMETER_DISABLE", "signals")
    assert _enter(run_root / "warm", "warm") is None  # the imports of a first start, out of the count
    total = _count_lines(run_root / "count")
    assert total > 200
    stride = max(1, total // 150)
    for k in range(1, total + 1, stride):
        raised = _enter(run_root / str(k), "ctrlc", _raise_at_line(k))
        assert raised is None or type(raised) is KeyboardInterrupt, f"line {k} of {total}: {raised!r}"
        _settle()
        assert_left_nothing(patch_points)


class _CutWait(threading.Event):
    """A thread's start flag whose first wait raises KeyboardInterrupt: ``Thread.start`` cut after the OS thread
    began, before it was seen running (a thread whose ``join`` would raise "cannot join thread before it is started")."""

    def wait(self, timeout=None):
        raise KeyboardInterrupt


def _cutting_start(monkeypatch, k: int, mode: str) -> list[str]:
    """Make the ``k``-th start of a thread of ours raise KeyboardInterrupt: ``before`` the OS thread, ``cut``
    inside start's wait, ``after`` start returned. Returns the names of ours started."""
    original = threading.Thread.start
    names: list[str] = []

    def start(self):
        if not self.name.startswith("trainmeter") or not _ENTERING.is_set():
            return original(self)
        names.append(self.name)
        if len(names) != k:
            return original(self)
        if mode == "before":
            raise KeyboardInterrupt
        if mode == "cut":
            self._started = _CutWait()
        original(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    return names


_FLAGS = {"alert": "nan:stop"}


@pytest.mark.parametrize("mode", ["before", "cut", "after"])
def test_ctrl_c_inside_the_start_of_each_thread_of_ours_is_the_users_keyboard_interrupt(run_root, patch_points,
                                                                                        monkeypatch, mode):
    with monkeypatch.context() as counting:
        started = _cutting_start(counting, 0, mode)
        assert _enter(run_root / "count", "count", **_FLAGS) is None
    assert started  # the heartbeat, SIGTERM watcher, node sampler, alerts
    for k in range(1, len(started) + 1):
        with monkeypatch.context() as cutting:
            _cutting_start(cutting, k, mode)
            raised = _enter(run_root / str(k), "ctrlc", **_FLAGS)
        assert type(raised) is KeyboardInterrupt, f"{mode} start of {started[k - 1]}: {raised!r}"
        _settle()
        assert_left_nothing(patch_points)


def test_a_real_ctrl_c_as_the_block_ends_before_finish_began_still_finishes_the_run(run_root, patch_points,
                                                                                       monkeypatch):
    import signal

    from trainmeter.core.controls import Controls

    end_status = Controls.end_status

    def interrupted(self, default):  # the user's Ctrl-C lands between the body's end and the finish
        signal.raise_signal(signal.SIGINT)
        return end_status(self, default)

    monkeypatch.setattr(Controls, "end_status", interrupted)
    block = tm.monitor(run_dir=run_root, name="ending", interval_s=60.0)
    m = block.__enter__()
    with pytest.raises(KeyboardInterrupt):
        block.__exit__(None, None, None)
    assert m.status == "completed" and (m.run_dir / "passport.json").exists()
    assert_left_nothing(patch_points)
