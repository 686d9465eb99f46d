"""Controls: stop after this step and checkpoint now, honoured at the next optimizer step boundary (docs/spec.md)."""

from __future__ import annotations

import json
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter as tm  # noqa: E402
from trainmeter.core import controls as controls_module  # noqa: E402
from trainmeter.core.controls import StopTraining  # noqa: E402
from trainmeter.core.extension import ExtensionBase  # noqa: E402
from trainmeter.core.monitor import active  # noqa: E402
from trainmeter.core.steps import _nothing  # noqa: E402
from trainmeter.extensions import make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402


def _passport(m):
    return json.loads((m.run_dir / "passport.json").read_text())


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(40)]
    return model, opt, batches


def _step(model, opt, batch) -> float:
    x, y = batch
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_tm_stop_ends_a_hand_loop_after_the_next_step_with_status_stopped(run_root):
    model, opt, batches = _setup()
    after = []
    with tm.monitor(run_dir=run_root, name="stop") as m:
        for i, batch in enumerate(batches):
            _step(model, opt, batch)
            if i == 4:
                assert tm.stop() is True
        after.append("unreachable")
    p = _passport(m)
    assert m.steps == 6 and after == []  # step 6 ran whole, then the loop ended
    assert p["status"] == "stopped" and p["stopped_by"] == "tm.stop" and p["stopped_at_step"] == 6
    assert p["stopped_via"] == "StopTraining" and p["error"] is None and p["stop_requested_at_step"] == 5
    assert "Stopped by tm.stop after step 6" in (m.run_dir / "passport.md").read_text()
    assert active() is None


def test_stop_training_is_not_swallowed_by_the_loops_except_exception(run_root):
    model, opt, batches = _setup()
    swallowed = 0
    with tm.monitor(run_dir=run_root) as m:
        tm.stop()
        for batch in batches:
            try:
                _step(model, opt, batch)
            except Exception:
                swallowed += 1
    assert swallowed == 0 and m.steps == 1 and m.status == "stopped"
    assert issubclass(StopTraining, BaseException) and not issubclass(StopTraining, Exception)


def test_stop_from_another_thread_is_honoured_at_a_step_boundary(run_root):
    model, opt, batches = _setup()
    asked = threading.Event()

    def watchdog():
        asked.set()
        tm.stop()

    with tm.monitor(run_dir=run_root) as m:
        for i, batch in enumerate(batches * 10):
            _step(model, opt, batch)
            if i == 2:
                t = threading.Thread(target=watchdog)
                t.start()
                t.join()
    assert asked.is_set() and m.steps == 4 and m.status == "stopped"


def test_the_closing_line_says_who_stopped_the_run_and_when(run_root, capsys):
    model, opt, batches = _setup()
    with tm.monitor(run_dir=run_root, name="said"):
        tm.stop()
        for batch in batches:
            _step(model, opt, batch)
    out = capsys.readouterr().out
    assert "run 'said' stopped by tm.stop at step 1 after 1 steps" in out
    assert "Traceback" not in out


def test_no_request_without_a_live_run():
    assert tm.stop() is False and tm.checkpoint() is False


def test_checkpoint_now_saves_loads_and_resumes_to_the_same_next_loss_bit_identical(run_root):
    model, opt, batches = _setup()
    losses = []
    with tm.monitor(run_dir=run_root) as m:
        for i, batch in enumerate(batches[:12]):
            losses.append(_step(model, opt, batch))
            if i == 6:
                assert tm.checkpoint() is True
    p = _passport(m)
    assert p["status"] == "completed"
    (ckpt,) = p["checkpoints"]
    assert ckpt["path"] == "checkpoints/step-8.pt" and ckpt["step"] == 8 and ckpt["source"] == "trainmeter"
    path = m.run_dir / ckpt["path"]
    assert ckpt["bytes"] == path.stat().st_size and ckpt["seconds"] >= 0
    assert p["phases_s"].get("checkpoint", 0) > 0  # timed as checkpoint, not training
    assert "Checkpoint at step 8: checkpoints/step-8.pt" in (m.run_dir / "passport.md").read_text()

    saved = torch.load(path, weights_only=True)
    assert saved["step"] == 8
    model2, opt2, _ = _setup(seed=123)  # other initial weights: everything comes from the checkpoint
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["optimizer"])
    resumed = [_step(model2, opt2, batch) for batch in batches[8:12]]
    assert resumed == losses[8:12]  # bit-identical on the CPU


def test_checkpoint_and_stop_together_save_first_then_stop(run_root):
    model, opt, batches = _setup()
    with tm.monitor(run_dir=run_root) as m:
        tm.checkpoint()
        tm.stop()
        for batch in batches:
            _step(model, opt, batch)
    p = _passport(m)
    assert p["status"] == "stopped" and p["stopped_at_step"] == 1
    assert [c["step"] for c in p["checkpoints"]] == [1]


def test_a_sharded_model_without_a_framework_saver_is_refused_with_the_reason(run_root, monkeypatch):
    monkeypatch.setattr(controls_module, "_sharded", lambda model: True)
    model, opt, batches = _setup()
    with pytest.warns(tm.core.monitor.MonitorWarning, match="refused: the model is sharded"):
        with tm.monitor(run_dir=run_root) as m:
            tm.checkpoint()
            for batch in batches[:3]:
                _step(model, opt, batch)
    p = _passport(m)
    assert p["checkpoints"] == [] and p["checkpoints_refused"][0]["step"] == 1
    assert "DTensor" in p["checkpoints_refused"][0]["reason"]
    assert not (m.run_dir / "checkpoints" / "step-1.pt").exists()


def test_a_compiled_region_is_not_a_boundary_the_checkpoint_refuses_and_names_it(run_root, monkeypatch):
    model, opt, batches = _setup()
    with tm.monitor(run_dir=run_root) as m:
        _step(model, opt, batches[0])
        monkeypatch.setattr(controls_module, "_compiling", lambda: True)
        with pytest.warns(tm.core.monitor.MonitorWarning, match="torch.compile"):
            assert m.controls.checkpoint_now("tm.checkpoint") is None
    assert "torch.compile" in _passport(m)["checkpoints_refused"][0]["reason"]


class _FakeControl:
    name = "fake"

    def __init__(self):
        self.stops = 0
        self.saved = []

    def request_stop(self) -> bool:
        self.stops += 1
        return True

    def save_checkpoint(self, dir_path: str, name: str) -> str | None:
        target = f"{dir_path}/{name}.fake"
        with open(target, "wb") as f:
            f.write(b"x" * 10)
        self.saved.append(target)
        return target


class _Frameworks(ExtensionBase):
    name = "frameworks"

    def __init__(self, control):
        self._control = control

    def start(self, monitor):
        monitor.controls.use_framework(self._control)  # as the integration wing does while a fit runs


def test_a_framework_in_use_is_asked_to_stop_and_to_save_through_its_own_mechanism(run_root):
    control = _FakeControl()
    model, opt, batches = _setup()
    options = make_options(run_dir=run_root, widget=False)
    m = make_monitor(options, extensions=[_Frameworks(control)], text=False)
    with tm.api.run_monitored(m):
        tm.checkpoint()
        tm.stop()
        for batch in batches[:5]:  # the framework's own loop would end here; the fake's goes on
            _step(model, opt, batch)
    p = _passport(m)
    assert control.stops == 1 and m.steps == 5  # no StopTraining: the framework ends itself
    assert p["status"] == "stopped" and p["stopped_via"] == "fake" and p["stopped_at_step"] == 1
    assert p["checkpoints"] == [{"path": "checkpoints/step-1.fake", "step": 1, "bytes": 10,
                                 "seconds": p["checkpoints"][0]["seconds"], "source": "fake"}]


class _Stepper(ExtensionBase):
    name = "stepper"

    def __init__(self):
        self.calls = []

    def start(self, monitor):
        self.m = monitor

    def on_step(self):
        self.calls.append(self.m.steps)
        self.m.next_step_hook_at(self.m.steps + 10, self)


def test_a_request_gives_the_dispatchers_step_hook_back_after_the_step(run_root):
    stepper = _Stepper()
    model, opt, batches = _setup()
    options = make_options(run_dir=run_root, widget=False)
    m = make_monitor(options, extensions=[stepper], text=False)
    with tm.api.run_monitored(m):
        for i, batch in enumerate(batches[:25]):
            _step(model, opt, batch)
            if i == 3:
                tm.checkpoint()
                assert m.steps_state.hook == m.controls._on_step and m.steps_state.hook_at == 0
        hook = m.steps_state.hook
    assert hook == stepper.on_step
    assert stepper.calls == [1, 5, 15, 25]  # the trampoline's step (5) also ran the wing's hook once
    assert [c.step for c in m.controls.checkpoints] == [5]


def test_a_request_without_any_wing_hook_leaves_the_step_path_as_it_was(run_root):
    model, opt, batches = _setup()
    options = make_options(run_dir=run_root, widget=False)
    m = make_monitor(options, extensions=[], text=False)
    with tm.api.run_monitored(m):
        _step(model, opt, batches[0])
        assert m.steps_state.hook is _nothing
        tm.checkpoint()
        _step(model, opt, batches[1])
        assert m.steps_state.hook is _nothing and m.steps_state.hook_at > 10**9
    assert len(m.controls.checkpoints) == 1


def test_requests_from_another_thread_are_never_lost_with_every_default_wing(run_root):
    """The request races the sampling wings' rescheduling of the step hook: each stop is still honoured."""
    import random

    from trainmeter.extensions import default_extensions

    rng = random.Random(0)
    for trial in range(12):
        model, opt, batches = _setup(seed=trial)
        options = make_options(run_dir=run_root, widget=False, interval_s=3600)
        m = make_monitor(options, extensions=default_extensions(options), text=False)
        delay_s = rng.uniform(0, 0.02)
        asker = threading.Timer(delay_s, tm.stop)
        with tm.api.run_monitored(m):
            asker.start()
            for i in range(200_000):
                _step(model, opt, batches[i % len(batches)])
        asker.join()
        stopped = m.controls.stopped
        assert m.status == "stopped" and stopped is not None and stopped.requested_at_step is not None
        assert stopped.step >= stopped.requested_at_step and m.steps < 200_000


def test_the_sampling_wing_keeps_recording_after_a_checkpoint(run_root):
    from trainmeter.extensions import default_extensions

    model, opt, batches = _setup()
    options = make_options(run_dir=run_root, widget=False, interval_s=3600)
    m = make_monitor(options, extensions=default_extensions(options), text=False)
    with tm.api.run_monitored(m):
        for i, batch in enumerate(batches):
            _step(model, opt, batch)
            if i == 9:
                tm.checkpoint()
    lr = m.series["lr"].stats()
    assert [c.step for c in m.controls.checkpoints] == [11] and lr.last_step is not None and lr.last_step > 30


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # Dynamo's notes on the builtins the probes call
def test_a_step_compiled_with_torch_compile_stops_and_checkpoints_at_its_boundary(run_root):
    model, opt, batches = _setup()
    x, y = batches[0]

    @torch.compile(backend="eager")
    def step():
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    with tm.monitor(run_dir=run_root, model=model) as m:
        for i in range(30):
            step()
            if i == 5:
                tm.checkpoint()
                tm.stop()
    p = _passport(m)
    assert p["status"] == "stopped" and p["stopped_at_step"] == 7
    assert [c["path"] for c in p["checkpoints"]] == ["checkpoints/step-7.pt"]
