"""The alerts wing: rules fire once, act (stop, checkpoint then stop), and are recorded (docs/spec.md)."""

from __future__ import annotations

import json
import math
import os
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from trainmeter.alerts.extension import Alerts  # noqa: E402
from trainmeter.core.extension import ExtensionBase  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def _loop(nan_at: int | None = None, steps: int = 60):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 4), torch.randn(8, 1)

    def run(n: int = steps) -> int:
        done = 0
        for i in range(1, n + 1):
            loss = F.mse_loss(model(x), y)
            if i == nan_at:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
            done = i
        return done

    return run


def _run(run_root, wings, **options):
    return make_monitor(make_options(run_dir=run_root, widget=False, **options), extensions=wings, text=False)


def test_nan_stop_ends_the_run_at_the_step_whose_loss_was_not_finite(run_root):
    run = _loop(nan_at=30)
    alerts = Alerts(["nan:stop"], watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        run()
    p = _passport(m)
    assert m.steps == 30 and p["status"] == "stopped"
    assert p["stopped_by"] == "alert:nan:stop" and p["stopped_at_step"] == 30
    (fired,) = p["alerts"]
    assert fired["rule"] == "nan:stop" and fired["step"] == 30 and "nan" in fired["sentence"]
    assert alerts.markers() == [{"kind": "alert", "step": 30, "label": "alert nan:stop",
                                 "sentence": fired["sentence"], "chart": "loss"}]


def test_checkpoint_stop_saves_the_step_before_the_nan_then_stops(run_root):
    run = _loop(nan_at=12)
    m = _run(run_root, [Alerts(["nan:checkpoint-stop"], watch_interval_s=3600)])
    with tm.api.run_monitored(m):
        run()
    p = _passport(m)
    assert p["stopped_at_step"] == 12 and [c["step"] for c in p["checkpoints"]] == [11]
    assert (m.run_dir / "checkpoints" / "step-11.pt").is_file()


def test_without_a_stopping_nan_rule_the_wing_has_no_step_hook(run_root):
    assert "on_step" not in vars(Alerts(["nan:show", "hang"]))
    assert vars(Alerts(["nan:stop"]))["on_step"] is not None


def test_a_series_rule_fires_once_and_stops_at_the_next_step(run_root):
    run = _loop()
    alerts = Alerts(["val_loss>2.5:stop"], watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        run(5)
        tm.emit(val_loss=3.0)
        run(1)  # the emit is recorded at the training thread's next step
        alerts.tick(m.clock())
        alerts.tick(m.clock())
        run(10)
    p = _passport(m)
    assert p["status"] == "stopped" and p["stopped_at_step"] == 7
    assert [a["rule"] for a in p["alerts"]] == ["val_loss>2.5:stop"]
    assert "val_loss = 3 > 2.5" in p["alerts"][0]["sentence"]


class _Verdicts(ExtensionBase):
    name = "verdicts"

    def view(self):
        return type("V", (), {"verdicts": ({"kind": "throughput_drop", "step": 4, "sentence": "slower"},)})()


def test_a_verdict_rule_fires_from_the_verdicts_view_and_shows_without_acting(run_root):
    run = _loop()
    alerts = Alerts(["throughput:notify", "spike:stop"], watch_interval_s=3600)
    m = _run(run_root, [_Verdicts(), alerts])
    with tm.api.run_monitored(m):
        run(5)
        alerts.tick(m.clock())
        run(5)
    p = _passport(m)
    assert p["status"] == "completed" and m.steps == 10
    assert p["alerts"] == [{"rule": "throughput:notify", "condition": "throughput", "action": "notify", "step": 4,
                            "t_s": p["alerts"][0]["t_s"], "sentence": "alert throughput:notify: slower",
                            "notify": True}]
    assert alerts.warnings() == ["alert throughput:notify: slower"]


def test_a_hang_fires_from_another_thread_with_the_training_threads_frames(run_root):
    run = _loop()
    alerts = Alerts(["hang=30:stop"], watch_interval_s=3600)
    m = _run(run_root, [alerts])
    ticked = threading.Event()

    def stuck_in_the_data_loader():
        t0 = m.clock()
        alerts.tick(t0)  # the step counter seen
        threading.Thread(target=lambda: (alerts.tick(t0 + 10), alerts.tick(t0 + 31), ticked.set())).start()
        assert ticked.wait(30)

    with tm.api.run_monitored(m):
        run(3)
        stuck_in_the_data_loader()
        assert alerts.view().fired and m.controls.pending()[0] == "alert:hang=30:stop"
        run(3)
    p = _passport(m)
    (hang,) = p["alerts"]
    assert hang["rule"] == "hang=30:stop" and hang["step"] == 3
    assert "no optimizer step for 31 s after step 3" in hang["sentence"]
    assert any("stuck_in_the_data_loader" in f for f in hang["where"])
    assert p["status"] == "stopped" and p["stopped_at_step"] == 4


def test_tm_alert_adds_a_rule_during_the_run_and_rejects_a_bad_one(run_root):
    run = _loop()
    alerts = Alerts((), watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        with pytest.raises(ValueError, match="unknown action"):
            tm.alert("nan:explode")
        assert tm.alert("val_loss<1:show") is True
        tm.emit(val_loss=0.5)
        run(1)
        alerts.tick(m.clock())
    assert [a["rule"] for a in _passport(m)["alerts"]] == ["val_loss<1:show"]
    assert tm.alert("nan") is False  # no run in progress


def _control(m, **fields):
    path = m.run_dir / "control.json"
    path.write_text(json.dumps(fields))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new write, even within one tick of mtime
    return path


def test_the_control_file_is_obeyed_once_only_for_this_run_and_a_known_action(run_root):
    run = _loop()
    alerts = Alerts((), watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        run(2)
        _control(m, run_id="another-run", action="stop", id="a")
        alerts.tick(m.clock())
        _control(m, run_id=m.run_dir.name, action="rm -rf", id="b")
        alerts.tick(m.clock())
        assert m.controls.pending() == (None, None)
        _control(m, run_id=m.run_dir.name, action="checkpoint", id="c")
        alerts.tick(m.clock())
        run(1)
        _control(m, run_id=m.run_dir.name, action="checkpoint", id="c")  # the same id again: done already
        alerts.tick(m.clock())
        run(1)
        _control(m, run_id=m.run_dir.name, action="stop", id="d")
        alerts.tick(m.clock())
        run(5)
    p = _passport(m)
    assert [c["step"] for c in p["checkpoints"]] == [3]
    assert p["status"] == "stopped" and p["stopped_by"] == "control-file" and p["stopped_at_step"] == 5


def test_a_control_file_that_is_a_link_is_ignored(run_root, tmp_path):
    run = _loop()
    alerts = Alerts((), watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        run(1)
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"run_id": m.run_dir.name, "action": "stop", "id": "x"}))
        (m.run_dir / "control.json").symlink_to(target)
        alerts.tick(m.clock())
        assert m.controls.pending() == (None, None)


def test_the_watchdog_thread_ends_with_the_run(run_root):
    m = _run(run_root, [Alerts(["hang"], watch_interval_s=0.01)])
    with tm.api.run_monitored(m):
        assert any(t.name == "trainmeter-alerts" for t in threading.enumerate())
    assert not any(t.name == "trainmeter-alerts" for t in threading.enumerate())
    assert math.isfinite(_passport(m)["elapsed_s"])



def test_a_device_loss_is_checked_when_its_value_arrives_after_its_step(run_root):
    from trainmeter.core.controls import StopTraining
    from trainmeter.core.series import Series

    alerts = Alerts(["nan:stop"], watch_interval_s=3600)
    m = _run(run_root, [alerts])
    with tm.api.run_monitored(m):
        series = Series("train_loss")
        m.steps_state.captured_series, m.steps_state.held_step, m.steps_state.steps = series, 0, 9  # nothing held at this step
        series.append(7, 0.0, 0.5)
        alerts.on_step()  # a finite loss: nothing
        series.append(8, 0.0, float("inf"))
        with pytest.raises(StopTraining):
            alerts.on_step()
        raise StopTraining("alert:nan:stop", 9)  # what the step hook would have let through
    (fired,) = _passport(m)["alerts"]
    assert fired["step"] == 9 and "the loss was inf at step 8 (read at step 9)" in fired["sentence"]


def test_a_hang_in_a_notebook_cell_names_the_cell_and_line_not_ipythons_temporary_file(ip):
    first = ip.run_cell("import threading\nfrom trainmeter.alerts.extension import thread_frames\n\n"
                        "def stuck():\n    return thread_frames(threading.get_ident())\n", store_history=True)
    second = ip.run_cell("where = stuck()", store_history=True)
    where = ip.user_ns["where"]
    assert f"cell [{second.execution_count}], line 1 in <module>" in where[-3]
    assert f"cell [{first.execution_count}], line 5 in stuck" in where[-2]  # the innermost: thread_frames itself


def test_a_hang_deep_below_a_cell_still_names_the_cell(ip):
    library = ("import threading\nfrom trainmeter.alerts.extension import thread_frames\n"
               "def deep(n):\n    return thread_frames(threading.get_ident(), limit=2) if n == 0 else deep(n - 1)\n")
    ip.user_ns["library"] = library
    ip.run_cell("exec(compile(library, '/site-packages/lib.py', 'exec'))", store_history=True)
    run = ip.run_cell("where = deep(12)", store_history=True)
    where = ip.user_ns["where"]
    assert where[0] == f"cell [{run.execution_count}], line 1 in <module>"
    assert where[1:] == ["/site-packages/lib.py:4 in deep", where[2]] and "thread_frames" in where[2]
