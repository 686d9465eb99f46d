"""Issue 40 item 8: a flood of side-thread ``tm.emit`` calls that are dropped (a full queue) or left out (bad values)
costs each a count: the warning is formatted once, one warning in all (docs/spec.md section 18). Counted, not timed:
trainmeter's Python calls on every thread (``sys.setprofile``, ``threading.setprofile``), per dropped value."""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections import Counter

import pytest

import trainmeter as tm
from trainmeter.core import emits
from trainmeter.core.monitor import MonitorWarning

FLOOD = 10_000
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="counts calls by co_qualname (Python 3.11+)")


def _flood(run_root, value, name: str, series: str = "x") -> tuple[Counter, list[str], dict]:
    """``FLOOD`` calls ``tm.emit(<series>=value)`` from one side thread; trainmeter's calls during the run by name,
    the run's warnings and its passport."""
    calls: Counter = Counter()

    def profile(frame, event, arg):
        if event == "call" and "/trainmeter/" in frame.f_code.co_filename:
            calls[frame.f_code.co_qualname] += 1
            if frame.f_code.co_qualname == "printable" and frame.f_back.f_code.co_filename.endswith("emits.py"):
                calls["printable in emits"] += 1

    def side() -> None:
        for _ in range(FLOOD):
            tm.emit(**{series: value})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threading.setprofile(profile)  # the side thread and the folding thread it starts
        sys.setprofile(profile)  # this one, which folds what is left at the run's end
        try:
            with tm.monitor(run_dir=run_root, name=name, interval_s=3600) as m:
                thread = threading.Thread(target=side)
                thread.start()
                thread.join()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    said = [str(w.message) for w in caught if issubclass(w.category, MonitorWarning)]
    return calls, said, json.loads((m.run_dir / "passport.json").read_text())


def test_values_dropped_at_a_full_queue_are_said_once_and_counted_without_a_warning_call_each(run_root, monkeypatch):
    monkeypatch.setattr(emits, "MAX_QUEUED", 100)  # a small queue
    monkeypatch.setattr(emits, "FOLD_WAKE_S", 3600.0)  # folded only at the run's end: every value past 100 drops
    calls, said, passport = _flood(run_root, 1.0, "full")
    assert passport["emits_dropped"] == FLOOD - 100 and passport["series"]["x"]["count"] == 100
    assert calls["Emitter._enqueue"] == FLOOD and calls["Faults.warn_once"] == 1  # was one a dropped value: 9,901
    assert len(said) == 1 and "more than 100 values waiting" in said[0]


def test_a_flood_of_bad_values_formats_its_warning_once_and_counts_the_rest(run_root):
    calls, said, passport = _flood(run_root, "text", "bad")
    assert passport["emits_ignored"] == FLOOD and "x" not in passport["series"]
    assert calls["Emitter.checked"] == FLOOD and calls["Faults.warn_once"] == 1  # was one a value: 10,000
    assert calls["printable in emits"] == 2  # the name and the reason, once (was twice a value: 20,000)
    assert len(said) == 1 and said[0].startswith("trainmeter: tm.emit(x=...) ignored: expected a float")


def test_a_reserved_name_flooded_from_a_side_thread_is_refused_once_then_counted(run_root):
    calls, said, passport = _flood(run_root, 1.0, "reserved", series="node.cpu")
    assert passport["emits_ignored"] == FLOOD and calls["SeriesRegistry.admit"] == 1  # was one a value
    assert len(said) == 1 and "the name is reserved" in said[0]
