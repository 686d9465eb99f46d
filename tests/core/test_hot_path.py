"""The hot path's cost as a count of calls, not a timing: what trainmeter runs per optimizer step.

``sys.setprofile`` sees every Python call and every C call of the training
thread. Over steps in steady state (after discovery, no report due) the calls
into trainmeter code and the C calls trainmeter code makes are counted and
divided by the steps: a deterministic figure, so a regression (a new frame, a
lookup, an extension doing work per step) fails here instead of hiding in a
noisy timing. The wall-time and instruction-count figures are in
``benchmarks/overhead.py`` (``./dev bench``).
"""

from __future__ import annotations

import collections
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainmeter  # noqa: E402
from trainmeter.extensions import default_extensions, make_monitor  # noqa: E402
from trainmeter.options import make_options  # noqa: E402

PACKAGE = str(Path(trainmeter.__file__).parent)
STEPS = 50
# Per step (core): the root's __call__ wrapper (a batch shaped like the last counted one counts
# the same), the autograd.backward wrapper (a 0-d CPU loss read and summed in place), the optimizer
# step hook and the one step rule it hands the step to (core/steps.py StepRecorder.step: every source of
# steps runs the same function; 3 before, when the hook ran a second copy of the rule inline).
MAX_PY_CALLS_PER_STEP = 4
# Per step (core): is_grad_enabled, Tensor.tolist (the CPU loss's value, as item() gives it, without releasing the
# GIL), perf_counter (the step's time) and 4 list appends (the step's time; the previous loss point's value, this
# one's step and time). The root's weak reference is called, not a C function (8 before, with id).
MAX_C_CALLS_PER_STEP = 7
# Per step with every default extension, on top of the core's: the optimizer wing reads the rate
# at the step (docs/spec.md section 2; every step for the first 100 steps, as here, then sampled by the
# read's cost and <= 100 points/s): its on_step, its _read and the lr Series.append (3 list appends, a len
# and a dict.get: the group count and the series; the clock read that times it and a max: its stride). The
# overhead wing times 1 step in 64 or more (Monitor.at_step arms it, Monitor.time_next_step swaps the rule's
# timed form in for that step, its callback takes the time and the next stride): amortized below.
EXTENSION_PY_CALLS_PER_STEP = 3 + 0.4
EXTENSION_C_CALLS_PER_STEP = 7 + 0.25
# The only extension code that runs on steady-state steps, and at most how often (calls per step).
EXTENSION_CALLS_PER_STEP = {
    "optim/extension.py:on_step": 1.0,
    "optim/extension.py:_read": 1.0,
    "overhead/extension.py:_arm": 1 / 64,
    "overhead/extension.py:_timed_step": 1 / 64,  # the timed step's callback
    "overhead/extension.py:_next_every": 1 / 64,  # the stride to the next timed step (64 at least)
}

class _Keywords(nn.Module):
    """A model called as Hugging Face's are: token ids and labels by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 1))

    def forward(self, input_ids=None, labels=None):
        return F.mse_loss(self.body(input_ids), labels)


def _loop(kind: str):
    torch.manual_seed(0)
    if kind == "keywords":  # model(input_ids=..., labels=...) returns the loss
        model = _Keywords()
        x = torch.randint(0, 32, (4, 6))
        y = torch.randn(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)

        def steps(n: int) -> None:
            for _ in range(n):
                loss = model(input_ids=x, labels=y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        return steps
    if kind == "ids":
        model = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(8 * 6, 1))
        x = torch.randint(0, 32, (4, 6))
    else:
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        x = torch.randn(32, 32)
    y = torch.randn(x.shape[0], 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def steps(n: int) -> None:
        for _ in range(n):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return steps


def _calls_per_step(tmp_path: Path, kind: str, extensions: str) -> tuple[dict, dict, object]:
    steps = _loop(kind)
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    exts = default_extensions(options) if extensions == "all" else []
    m = make_monitor(options, extensions=exts, text=False).start()
    py: collections.Counter[str] = collections.Counter()
    c: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(PACKAGE):
                py[f"{Path(code.co_filename).relative_to(PACKAGE)}:{code.co_name}"] += 1
        elif event == "c_call" and frame.f_code.co_filename.startswith(PACKAGE):
            c[getattr(arg, "__qualname__", repr(arg))] += 1

    try:
        steps(20)  # discovery and the first counted batches
        sys.setprofile(profile)
        try:
            steps(STEPS)
        finally:
            sys.setprofile(None)
    finally:
        m.finish("completed")
    return py, c, m


@pytest.mark.parametrize("kind", ["ids", "floats", "keywords"])
@pytest.mark.parametrize("extensions", ["core", "all"])
def test_a_step_in_steady_state_costs_a_fixed_handful_of_calls(tmp_path, kind, extensions):
    py, c, m = _calls_per_step(tmp_path, kind, extensions)
    per_step_py = sum(py.values()) / STEPS
    per_step_c = sum(c.values()) / STEPS
    assert m.steps == 20 + STEPS
    extra_py = EXTENSION_PY_CALLS_PER_STEP if extensions == "all" else 0
    extra_c = EXTENSION_C_CALLS_PER_STEP if extensions == "all" else 0
    assert per_step_py <= MAX_PY_CALLS_PER_STEP + extra_py, dict(py)
    assert per_step_c <= MAX_C_CALLS_PER_STEP + extra_c, dict(c)


def test_only_the_named_extension_calls_run_per_step(tmp_path):
    py, _, _ = _calls_per_step(tmp_path, "ids", "all")
    outside = {name: n / STEPS for name, n in py.items() if not name.startswith("core/")}
    assert set(outside) <= set(EXTENSION_CALLS_PER_STEP), outside
    for name, per_step in outside.items():
        assert per_step <= EXTENSION_CALLS_PER_STEP[name] + 1 / STEPS, (name, per_step)


@pytest.mark.parametrize("by_keyword", [False, True])
def test_the_batch_shape_is_read_not_recounted_and_a_new_shape_is_counted_exactly(tmp_path, by_keyword):
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Embedding(32, 8), nn.Linear(8, 1))

        def forward(self, input_ids=None, attention_mask=None):
            return self.body(input_ids)

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    shapes = [(4, 6)] * 30 + [(4, 5)] + [(4, 6)] * 10 + [(2, 6), (8, 3)] * 5
    calls = collections.Counter()
    batch_py = str(Path(PACKAGE) / "core" / "batch.py")

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == batch_py and frame.f_code.co_name in ("count",
                                                                                                 "count_batch"):
            calls["count_batch"] += 1

    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    m = make_monitor(options, extensions=[], text=False).start()
    sys.setprofile(profile)
    try:
        for shape in shapes:
            ids = torch.randint(0, 32, shape)
            loss = (model(input_ids=ids, attention_mask=torch.ones(shape)) if by_keyword else model(ids)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        sys.setprofile(None)
        m.finish("completed")
    assert m.tokens == sum(a * b for a, b in shapes)
    assert m.step_series.stats().count == len(shapes)
    # counted at the first batch and at each change of shape only
    changes = 1 + sum(1 for a, b in zip(shapes, shapes[1:], strict=False) if a != b)
    assert calls["count_batch"] <= changes + 1  # (+1: model discovery reads the first batch too)


def test_start_leaves_psutil_nvml_and_the_platform_scan_to_other_threads(tmp_path):
    """Run start-up on the training thread: no psutil read, no NVML open, no libc scan of the interpreter.

    The GPU sampler object itself is built here (``GpuSampler.in_background``, docs/spec.md section 8) and opens
    NVML on its own thread: what must not run here is the NVML binding (``gpu/nvml*.py``).
    """
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            if "/psutil/" in name or "/pynvml" in name or name.endswith(("gpu/nvml.py", "host/read.py")):
                seen.add(f"{Path(name).name}:{frame.f_code.co_name}")
            elif frame.f_code.co_name == "libc_ver":
                seen.add("platform.libc_ver")

    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    m = make_monitor(options, extensions=default_extensions(options), text=False)
    sys.setprofile(profile)
    try:
        m.start()
    finally:
        sys.setprofile(None)
        m.finish("completed")
    assert seen == set()


def test_a_batch_whose_shape_cannot_be_read_after_a_counted_one_warns_and_never_raises(tmp_path):
    from trainmeter.core.monitor import MonitorWarning

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            return self.lin(torch.ones(2, 4) if x.is_nested else x)

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "nested tensors are in prototype stage"
        nested = torch.nested.nested_tensor([torch.ones(2, 4), torch.ones(3, 4)])
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    m = make_monitor(options, extensions=[], text=False).start()
    try:
        with pytest.warns(MonitorWarning, match="token counting disabled"):
            for x in [torch.ones(2, 4)] * 3 + [nested, torch.ones(2, 4)]:
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        m.finish("completed")
    assert m.steps == 5 and m.tokens == 3 * 2


# Python bytecode instructions trainmeter's own frames run per steady step (core alone), counted with
# sys.settrace opcode events (`python benchmarks/overhead.py ops` prints them by function): 300 on CPython 3.11
# since the step hook hands the step to the one step rule (core/steps.py) instead of running a copy of it inline,
# which reads its clock as a slot then calls it (3 opcodes more than a method call of the slot, whose lookup
# CPython 3.11 does not specialize: fewer instructions) (282 then; 284 before the backward wrapper tested its fast path first; 298 before one flag, inline, stood for the
# open point with no loss or read pending; 327 before the loss point was held as train_loss's open point; 331
# before the call wrapper took the batch as a parameter of its own; docs/spec.md section 20). Opcode counts are
# the interpreter's own, so the bound holds for the CPython minor version it was measured on.
MAX_OPCODES_PER_STEP = {(3, 11): 300}


@pytest.mark.parametrize("kind", ["ids", "floats"])
def test_a_steady_step_runs_a_bounded_number_of_trainmeter_opcodes(tmp_path, kind):
    bound = MAX_OPCODES_PER_STEP.get(sys.version_info[:2])
    if bound is None:
        pytest.skip(f"the opcode bound was measured on CPython {list(MAX_OPCODES_PER_STEP)}")
    steps = _loop(kind)
    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    m = make_monitor(options, extensions=[], text=False).start()
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.startswith(PACKAGE):
            frame.f_trace_opcodes = True
            if event == "opcode":
                counts[frame.f_code.co_name] += 1
            return tracer
        return None  # torch's and the loop's frames: not traced line by line

    try:
        steps(20)
        sys.settrace(tracer)
        try:
            steps(STEPS)
        finally:
            sys.settrace(None)
    finally:
        m.finish("completed")
    per_step = sum(counts.values()) / STEPS
    print(f"{kind}: {per_step:.1f} trainmeter opcodes per step")
    assert per_step <= bound, dict(counts)



def test_an_empty_optimizer_step_in_steady_state_costs_the_step_hook_and_the_rule(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(32, 32), torch.randn(32, 1)

    def step(forward: bool) -> None:
        if forward:
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()

    options = make_options(run_dir=tmp_path, interval_s=3600, widget=False)
    m = make_monitor(options, extensions=[], text=False).start()
    py: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            py[frame.f_code.co_name] += 1

    try:
        for _ in range(20):
            step(True)
        sys.setprofile(profile)
        try:
            for _ in range(STEPS):
                step(False)  # no forward, no backward: no tokens, no loss
        finally:
            sys.setprofile(None)
        tokens = m.tokens
        for _ in range(5):
            step(True)  # steady steps after the empty ones count as before
    finally:
        m.finish("completed")
    # the step hook and the step rule alone (its loss-less part, a new tokens-per-step run and the held loss point
    # once: benchmarks/empty_step.py)
    assert sum(py.values()) / STEPS <= 2 + 3 / STEPS, dict(py)
    assert m.steps == 20 + STEPS + 5
    assert m.tokens == tokens + 5 * 32 and tokens == 20 * 32
