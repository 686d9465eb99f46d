"""The dispatcher: one error policy over the extensions, the sampled on_step, phases and views."""

from __future__ import annotations

import warnings

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.dispatch import Dispatcher
from trainmeter.core.extension import ExtensionBase
from trainmeter.core.monitor import MonitorWarning
from trainmeter.core.steps import _nothing
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


class Recorder(ExtensionBase):
    def __init__(self, name: str, fail: tuple[str, ...] = (), requires: tuple[str, ...] = ()) -> None:
        self.name, self.fail, self.requires = name, fail, requires  # type: ignore[misc]
        self.calls: list[str] = []

    def _note(self, event: str) -> None:
        self.calls.append(event)
        if event in self.fail:
            raise RuntimeError(f"{self.name} {event}")

    def start(self, monitor):
        self._note("start")

    def stop(self):
        self._note("stop")

    def on_report(self, report):
        self._note("on_report")
        return {"steps": report.steps}

    def tiles(self):
        self._note("tiles")
        return [{"id": self.name}]

    def passport_section(self):
        self._note("passport_section")
        return {"ok": True}


def _monitor(tmp_path, *extensions, **kwargs):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False), clock=FakeClock(0.0),
                        text=False, probes=False, extensions=list(extensions), **kwargs)


def test_a_faulting_event_warns_once_and_is_disabled_while_the_others_still_run(tmp_path):
    bad, good = Recorder("bad", fail=("tiles",)), Recorder("good")
    m = _monitor(tmp_path, bad, good).start()
    with pytest.warns(MonitorWarning, match=r"tiles-bad failed and was disabled: RuntimeError\('bad tiles'\)"):
        assert m.dispatch.collect("tiles") == [{"id": "good"}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)
        assert m.dispatch.collect("tiles") == [{"id": "good"}]  # no second warning, no second call
    m.finish("completed")
    assert bad.calls.count("tiles") == 1 and good.calls.count("tiles") >= 2  # (+1: the saved dashboard)
    assert sum("tiles-bad" in w for w in m.warnings) == 1
    assert "on_report" in bad.calls and "passport_section" in bad.calls  # its other events went on


def test_a_fault_in_start_disables_only_start_and_the_extension_still_stops_and_reports(tmp_path):
    bad, good = Recorder("bad", fail=("start",)), Recorder("good")
    with pytest.warns(MonitorWarning, match="start-bad failed and was disabled"):
        m = _monitor(tmp_path, bad, good).start()
    m.finish("completed")
    assert bad.calls[:2] == ["start", "stop"] and "passport_section" in bad.calls  # it says it did not start
    assert good.calls[0] == "start" and "passport_section" in good.calls


def test_a_faulting_report_leaves_its_field_empty_and_the_run_log_still_gets_the_others(tmp_path):
    import json

    bad, good = Recorder("bad", fail=("on_report",)), Recorder("good")
    with pytest.warns(MonitorWarning, match="fields-bad failed"):
        m = _monitor(tmp_path, bad, good).start()
        m.on_step(10)
        m.finish("completed")
    records = [json.loads(line) for line in (m.run_dir / "events.jsonl").read_text().splitlines()]
    interval = next(r for r in records if r["kind"] == "interval")
    assert interval["good"] == {"steps": 1} and interval["bad"] is None


def test_the_order_comes_from_requires_not_from_the_list(tmp_path):
    reader, source = Recorder("reader", requires=("source",)), Recorder("source")
    m = _monitor(tmp_path, reader, source)
    assert [e.name for e in m.extensions] == ["source", "reader"]


def test_a_cycle_at_run_time_warns_once_and_keeps_the_given_order(tmp_path):
    a, b = Recorder("a", requires=("b",)), Recorder("b", requires=("a",))
    m = _monitor(tmp_path, a, b)
    with pytest.warns(MonitorWarning, match="the requirements of a, b form a cycle: the extensions run in the order"):
        m.start()
    m.finish("completed")
    assert [e.name for e in m.extensions] == ["a", "b"] and a.calls[0] == b.calls[0] == "start"


class Stepper(ExtensionBase):
    def __init__(self, name: str, every: int, fail_at: int | None = None) -> None:
        self.name, self.every, self.fail_at = name, every, fail_at  # type: ignore[misc]
        self.seen: list[int] = []
        self.m = None

    def start(self, monitor):
        self.m = monitor

    def on_step(self):
        steps = self.m.steps
        if steps == self.fail_at:
            raise ValueError("step fault")
        self.seen.append(steps)
        self.m.next_step_hook_at(steps + self.every, self)


def test_one_sampled_on_step_is_called_with_no_frame_of_the_dispatcher_between(tmp_path):
    one = Stepper("one", every=3)
    m = _monitor(tmp_path, one).start()
    assert m.steps_state.hook == one.on_step  # the wing's own bound method
    for _ in range(10):
        m.on_step(1)
    m.finish("completed")
    assert one.seen == [1, 4, 7, 10]


def test_several_sampled_on_steps_each_keep_their_own_schedule(tmp_path):
    two, five = Stepper("two", every=2), Stepper("five", every=5)
    m = _monitor(tmp_path, two, five).start()
    for _ in range(11):
        m.on_step(1)
    m.finish("completed")
    assert two.seen == [1, 3, 5, 7, 9, 11] and five.seen == [1, 6, 11]


def test_a_faulting_on_step_never_raises_into_the_loop_and_is_not_called_again(tmp_path):
    bad = Stepper("bad", every=1, fail_at=3)
    m = _monitor(tmp_path, bad).start()
    with pytest.warns(MonitorWarning, match="on_step-bad failed and was disabled: ValueError"):
        for _ in range(6):
            m.on_step(1)
    m.finish("completed")
    assert bad.seen == [1, 2] and m.steps == 6


class Phases(ExtensionBase):
    name = "phases"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_phase(self, name, edge, t_s):
        self.seen.append((name, edge))


def test_phases_reach_the_extensions_that_watch_them(tmp_path):
    ext = Phases()
    m = _monitor(tmp_path, ext).start()
    m.enter_phase("eval")
    m.enter_phase("checkpoint")  # nested: counted once, as the outermost
    m.exit_phase()
    m.exit_phase()
    m.finish("completed")
    assert ext.seen == [("eval", "begin"), ("eval", "end")]


def test_training_activity_is_sent_only_while_a_wing_watches_for_it():
    class Probes:
        on_training = None

    class Run:
        probes = Probes()
        steps = 0
        context = None  # what the wings are handed (core/context.py)

        def elapsed_s(self):
            return 1.5

        def set_step_hook(self, fn, **kwargs):
            pass

    ext = Phases()
    dispatch = Dispatcher([ext])
    dispatch.start(Run())
    assert Run.probes.on_training is None
    dispatch.watch_training(ext)
    Run.probes.on_training()  # a training forward while the span is open
    dispatch.unwatch_training(ext)
    assert Run.probes.on_training is None and ext.seen == [("train", "begin")]


def test_a_view_is_asked_for_by_name_and_an_absent_wing_reads_none(tmp_path):
    class Published(ExtensionBase):
        name = "source"

        def view(self):
            return ("figures", 42)

    m = _monitor(tmp_path, Published())
    assert m.extension("source") == ("figures", 42) and m.extension("nothing") is None


def test_a_faulting_view_reads_as_absent_and_warns_once(tmp_path):
    class Broken(ExtensionBase):
        name = "source"

        def view(self):
            raise KeyError("figures")

    m = _monitor(tmp_path, Broken())
    with pytest.warns(MonitorWarning, match="view-source failed and was disabled"):
        assert m.extension("source") is None
    assert m.extension("source") is None


def test_dropped_extensions_get_no_more_events_and_their_on_step_is_disarmed(tmp_path):
    sampler, keeper = Stepper("gpu", every=1), Stepper("optim", every=1)
    m = _monitor(tmp_path, sampler, keeper).start()
    m.on_step(1)
    m.dispatch.drop({"gpu"})  # as in a forked child: the sampler wings' threads did not survive
    m.on_step(1)
    m.finish("completed")
    assert [e.name for e in m.extensions] == ["optim"]
    assert sampler.seen == [1] and keeper.seen == [1, 2] and m.steps_state.hook is _nothing


def test_a_deferred_reports_two_parts_give_the_fields_of_one_report_in_the_extension_order() -> None:
    from trainmeter.core.extension import Report

    class Wing(ExtensionBase):
        def __init__(self, name: str, on_worker: bool) -> None:
            self.name, self.report_on_worker = name, on_worker

        def on_report(self, report: Report) -> dict:
            return {"by": self.name}

    d = Dispatcher([Wing("a", True), Wing("b", False), Wing("c", True)])
    report = Report(steps=1, tokens=1, elapsed_s=1.0, final=False, phases_s={})
    inline = d.report(report, on_worker=False)
    assert inline == {"b": {"by": "b"}}
    whole = d.report(report, on_worker=True, before=inline)
    assert list(whole) == ["a", "b", "c"] and whole == d.report(report)


def test_a_torn_wing_is_left_out_of_the_forked_child_unless_it_rehomes_its_own_state() -> None:
    class Rehomes(Recorder):
        def after_fork_in_child(self, monitor):
            self._note("after_fork_in_child")

    said: list[tuple[str, str]] = []
    plain, rehomes, untouched = Recorder("plain"), Rehomes("rehomes"), Recorder("untouched")
    d = Dispatcher([plain, rehomes, untouched], warn_once=lambda key, message: said.append((key, message)))
    class Child:
        context = None  # what the wings are handed (core/context.py)

        def set_step_hook(self, *args, **kwargs):
            pass

    d.after_fork_in_child(Child(), torn="plain")
    assert [e.name for e in d.extensions] == ["rehomes", "untouched"]
    assert rehomes.calls == ["after_fork_in_child"]
    assert said == [("fork-torn", "plain: off in this forked child (its report work was under way on the report "
                                  "worker at the fork)")]


def test_a_torn_report_job_leaves_out_every_wing_reporting_on_the_worker_that_does_not_rehome() -> None:
    class Child:
        context = None  # what the wings are handed (core/context.py)

        def set_step_hook(self, *args, **kwargs):
            pass

    class OnWorker(Recorder):
        report_on_worker = True

    class RehomesOnWorker(OnWorker):
        def after_fork_in_child(self, monitor):
            self._note("after_fork_in_child")

    d = Dispatcher([OnWorker("a"), RehomesOnWorker("b"), Recorder("c")], warn_once=lambda key, message: None)
    d.after_fork_in_child(Child(), torn="report")
    assert [e.name for e in d.extensions] == ["b", "c"]
    d.after_fork_in_child(Child())  # nothing under way at the fork: nothing left out
    assert [e.name for e in d.extensions] == ["b", "c"]
