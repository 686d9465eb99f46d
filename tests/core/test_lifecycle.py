"""A run's lifecycle: one run at a time, finish parts run once, SIGTERM that does not end the process saves."""

from __future__ import annotations

import io
import json
import threading

import pytest

from trainmeter.core.clock import FakeClock
from trainmeter.core.monitor import MonitorWarning, active
from trainmeter.extensions import make_monitor
from trainmeter.options import make_options


def _monitor(tmp_path, name="life", **kwargs):
    return make_monitor(make_options(run_dir=tmp_path, interval_s=3600, widget=False, name=name), clock=FakeClock(),
                        text=False, probes=False, extensions=[], **kwargs)


def test_a_second_run_is_refused_while_one_is_active_and_the_first_keeps_the_slot(tmp_path):
    first = _monitor(tmp_path, "first").start()
    with pytest.raises(RuntimeError, match=r"a run \('first'\) is already being monitored"):
        _monitor(tmp_path, "second").start()
    assert active() is first
    first.finish("completed")
    assert active() is None


def test_finishing_twice_runs_each_part_once(tmp_path):
    out = io.StringIO()
    m = _monitor(tmp_path, out=out).start()
    m.on_step(4)
    m.finish("completed")
    m.finish("failed")
    assert m.status == "completed"
    assert out.getvalue().count("completed after 1 steps") == 1


def test_a_sigterm_the_program_survives_saves_a_terminated_passport_and_the_run_goes_on(tmp_path):
    m = _monitor(tmp_path).start()
    m.on_step(4)
    with pytest.warns(MonitorWarning, match="SIGTERM at step 1"):
        m.lifecycle.on_terminate()
    assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "terminated"
    assert m.status == "running" and active() is m
    m.finish("completed")
    assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "completed"


# -- the passport written on the report worker while the training thread waits (docs/spec.md section 20) ----------
def _train_with_every_extension(tmp_path, threaded: bool, steps: int = 30):
    torch = pytest.importorskip("torch")
    from tests.conftest import tiny_model_and_data, train_steps
    from trainmeter.extensions import default_extensions

    options = make_options(run_dir=tmp_path, interval_s=5.0, widget=False, name="every")
    clock = FakeClock(100.0)
    m = make_monitor(options, clock=clock, text=False, extensions=default_extensions(options)).start()
    m.worker.threaded = threaded  # a fake clock's worker runs jobs at once; threaded: as a real run's does
    model, opt, batches = tiny_model_and_data()
    for i in range(steps):
        clock.advance(0.5)
        train_steps(model, opt, [batches[i % len(batches)]])
    assert torch is not None
    m.finish("completed")
    m.kept_alive = (model, opt)  # the lanes name the optimizer while it lives
    return m


def _written(m):
    return {name: (m.run_dir / name).read_text() for name in ("passport.json", "passport.md", "dashboard.json")}



def test_the_passport_the_worker_writes_is_the_one_the_training_thread_builds_from_the_same_final_state(
        tmp_path, monkeypatch):
    from trainmeter.record import recorder
    from trainmeter.record.passport import build_passport, render_markdown
    from trainmeter.record.runlog import json_lines

    threads = []
    write = recorder.RunRecorder.write_passport

    def spy(self, run):
        threads.append(threading.current_thread().name)
        return write(self, run)

    monkeypatch.setattr(recorder.RunRecorder, "write_passport", spy)
    m = _train_with_every_extension(tmp_path, threaded=True)
    assert threads == ["trainmeter-report-worker"]
    written = _written(m)
    run = m.context  # on this thread
    again = json.loads(json_lines({**build_passport(run), "record": m.record_sink.record_section(run)}))
    assert written["passport.md"] == render_markdown(again)
    on_worker = json.loads(written["passport.json"])
    assert on_worker.pop("files")[-2:] == ["passport.md", "dashboard.json"]  # written last (spec section 6)
    for p in (on_worker, again):  # the log has grown by the passport's end record since: its size differs
        p["overhead"].pop("run_log_bytes"), p["overhead"].pop("run_log_bytes_per_s")
    assert on_worker == again


_MEASURED = ("started_at", "ended_at", "memory", "node", "rss_bytes", "rss_peak_bytes", "wall_s", "run_log_bytes",
             "run_log_bytes_per_s", "threads")  # the machine's readings: differ run to run


def _steady(value):
    if isinstance(value, dict):
        return {k: None if k in _MEASURED or k.startswith("node.") else _steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def test_a_threaded_and_an_inline_run_write_the_same_passport(tmp_path):
    on_worker = _written(_train_with_every_extension(tmp_path / "a", threaded=True))
    inline = _written(_train_with_every_extension(tmp_path / "b", threaded=False))
    assert _steady(json.loads(on_worker["passport.json"])) == _steady(json.loads(inline["passport.json"]))
    lines = [[line for line in w["passport.md"].splitlines() if not line.startswith(("- Started", "- Host memory"))]
             for w in (on_worker, inline)]
    assert lines[0] == lines[1]


def test_a_worker_that_never_takes_the_passport_job_leaves_it_to_the_training_thread(tmp_path):
    m = _monitor(tmp_path).start()
    m.on_step(4)
    m.worker.threaded = True
    m.worker.disabled.add("passport")  # as a stuck or faulted worker: the job is dropped
    m.finish("completed")
    assert json.loads((m.run_dir / "passport.json").read_text())["status"] == "completed"


def test_a_passport_write_that_fails_on_the_worker_warns_as_the_passport_part_and_the_run_is_kept(
        tmp_path, monkeypatch):
    from trainmeter.record import recorder

    def broken(self, run):
        raise RuntimeError("no passport")

    monkeypatch.setattr(recorder.RunRecorder, "write_passport", broken)
    m = _monitor(tmp_path).start()
    m.on_step(4)
    m.worker.threaded = True
    with pytest.warns(MonitorWarning, match=r"passport failed and was disabled: RuntimeError\('no passport'\)"):
        m.finish("completed")
    assert active() is None


def test_a_run_cut_by_ctrl_c_or_an_exception_is_saved_by_the_worker_before_the_error_reaches_the_user(tmp_path):
    import trainmeter as tm

    for error, status in ((KeyboardInterrupt(), "interrupted"), (ValueError("boom"), "failed")):
        with pytest.raises(type(error)):
            with tm.monitor(run_dir=tmp_path / status, interval_s=3600) as m:
                m.on_step(4)
                assert m.worker.threaded  # a real clock's run: the passport is written on the worker
                raise error
        assert json.loads((m.run_dir / "passport.json").read_text())["status"] == status
