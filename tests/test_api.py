"""Public API: status paths, exceptions propagate unchanged, emit and phase."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainmeter as tm
from trainmeter.core.monitor import active


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def test_completed_run_writes_passport_and_markdown(run_root):
    with tm.monitor(run_dir=run_root, name="ok") as m:
        tm.emit(train_loss=1.5)
    p = _passport(m)
    assert p["status"] == "completed" and p["name"] == "ok"
    for key in ("schema_version", "started_at", "ended_at", "steps", "tokens", "phases_s", "throughput",
                "memory", "params", "series", "environment"):
        assert key in p
    assert (m.run_dir / "passport.md").read_text().startswith("## Training run: ok")
    assert m.run_dir.name.endswith("-ok") and m.run_dir.parent == run_root


def test_user_exception_propagates_unchanged_and_run_is_failed(run_root):
    err = ValueError("boom")
    with pytest.raises(ValueError) as caught:
        with tm.monitor(run_dir=run_root) as m:
            raise err
    assert caught.value is err
    p = _passport(m)
    assert p["status"] == "failed" and p["error"] == "ValueError: boom"


def test_keyboard_interrupt_propagates_and_run_is_interrupted(run_root):
    with pytest.raises(KeyboardInterrupt):
        with tm.monitor(run_dir=run_root) as m:
            raise KeyboardInterrupt
    assert _passport(m)["status"] == "interrupted"
    assert active() is None


def test_a_ctrl_c_between_the_start_and_the_body_leaves_no_run_active(run_root):
    # A real Ctrl-C is raised where Python checks for signals (a function's entry, a C call's return): raise
    # one at each such point from the moment the start lets Ctrl-C through again until the body runs, and
    # keep its traceback as IPython does (sys.last_traceback), which keeps the context's frames alive
    import sys

    from trainmeter.core.interrupts import HeldInterrupts
    from trainmeter.core.lifecycle import Lifecycle

    def body():
        pass

    n, kept = 0, []
    while True:
        n += 1
        seen = {"started": False, "points": 0}

        def profile(frame, event, arg, n=n, seen=seen):
            if (event == "return" and frame.f_code is HeldInterrupts.__exit__.__code__
                    and frame.f_back.f_code is Lifecycle.start.__code__):
                seen["started"] = True
            elif seen["started"] and event == "call" and frame.f_code is body.__code__:
                sys.setprofile(None)
            elif seen["started"] and event in ("call", "c_return"):
                seen["points"] += 1
                if seen["points"] == n:
                    sys.setprofile(None)
                    raise KeyboardInterrupt

        sys.setprofile(profile)
        try:
            with tm.monitor(run_dir=run_root, interval_s=3600):
                body()
        except KeyboardInterrupt as exc:
            kept.append(exc.__traceback__)
            assert active() is None, f"a Ctrl-C at point {n} after the start left the run active"
        finally:
            sys.setprofile(None)
        if seen["points"] < n:
            break  # the body ran: every point in between was tried
    assert n > 1 and len(kept) == n - 1


def test_bad_option_raises_before_a_run_folder_exists(run_root):
    with pytest.raises(ValueError, match="--interval"):
        with tm.monitor(run_dir=run_root, interval_s=-1):
            pass
    assert not run_root.exists()


def test_emit_without_a_run_is_a_noop():
    tm.emit(train_loss=1.0)  # must not raise


def test_phase_credits_the_span(run_root):
    import time

    with tm.monitor(run_dir=run_root) as m:
        with tm.phase("checkpoint"):
            time.sleep(0.02)
        with tm.phase("warmup"):
            pass
    p = _passport(m)
    assert p["phases_s"]["checkpoint"] >= 0.02 and "warmup" in p["phases_s"]


@pytest.mark.parametrize("bad", ["train", "Eval", "", 3, "has space"])
def test_phase_rejects_bad_names(bad):
    with pytest.raises(ValueError, match="invalid phase name"):
        with tm.phase(bad):
            pass


def test_runs_lists_and_load_reads_saved_runs(run_root):
    with tm.monitor(run_dir=run_root, name="a"):
        pass
    with tm.monitor(run_dir=run_root, name="b"):
        pass
    found = tm.runs(run_root)
    assert [r.name for r in found] == ["a", "b"]
    again = tm.load(found[0].dir / "passport.json")
    assert again.dir == found[0].dir and again.passport["status"] == "completed"
    assert again.events()[0]["kind"] == "start"


def test_load_names_a_path_without_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trainmeter run"):
        tm.load(tmp_path)


def test_import_does_not_pull_heavy_modules():
    import subprocess
    import sys

    code = "import sys, trainmeter; print(sorted(m for m in ('torch','pynvml','IPython','numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_emit_with_an_empty_name_is_dropped_with_one_warning(tmp_path):
    from trainmeter.core.clock import FakeClock
    from trainmeter.core.monitor import MonitorWarning
    from trainmeter.extensions import make_monitor
    from trainmeter.options import make_options

    m = make_monitor(make_options(run_dir=tmp_path), clock=FakeClock(), text=False, probes=False,
                     extensions=[]).start()
    with pytest.warns(MonitorWarning, match="a series needs a name"):
        tm.emit(**{"": 1.0, "ok": 2.0})
    tm.emit(**{"": 3.0})
    m.finish("completed")
    assert "" not in m.series and m.series["ok"].stats().count == 1


def test_preload_imports_what_a_runs_start_report_and_finish_would_and_no_torch_nor_thread():
    # that a run's start, first report and finish then import nothing of ours: tests/test_extensions.py
    code = ("import sys, threading, trainmeter as tm; from trainmeter import extensions as x; tm.preload(); "
            "print(sorted(set(x.START_MODULES + x.REPORT_AND_FINISH_MODULES) - set(sys.modules)), "
            "'torch' in sys.modules, threading.active_count())")
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] False 1"
