"""The wiring: the default wings, in the order their requirements give."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from trainmeter.core.extension import order_extensions
from trainmeter.extensions import WING_NAMES, default_extensions
from trainmeter.options import make_options


def _names(exts) -> list[str]:
    return [e.name for e in exts]


def test_the_default_wings_come_in_the_order_their_requirements_give():
    names = _names(default_extensions(make_options()))
    assert names == ["overhead", "compute", "gpu", "energy", "time", "node", "taps", "frameworks", "distributed",
                     "optim", "curves", "alerts", "verdicts"]
    assert set(names) == set(WING_NAMES) - {"lineage"}  # lineage: a run given --resume (tests/lineage)


def test_the_stated_requirements_hold_whatever_order_the_wings_are_listed_in():
    exts = default_extensions(make_options())
    for seed in range(20):
        shuffled = list(exts)
        random.Random(seed).shuffle(shuffled)
        names = _names(order_extensions(shuffled, known=WING_NAMES))
        assert names[0] == "overhead" and names[-1] == "verdicts"  # at stop the others' threads still run; last
        for reader, source in (("gpu", "compute"), ("energy", "gpu"), ("energy", "compute"),
                               ("distributed", "compute"), ("distributed", "gpu"), ("curves", "compute")):
            assert names.index(source) < names.index(reader), (seed, reader, source)


def test_a_rank_without_the_node_samplers_still_orders_its_wings(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    names = _names(default_extensions(make_options()))
    assert "gpu" not in names and "node" not in names
    assert names.index("compute") < names.index("energy") and names[-1] == "verdicts"


# -- %load_ext's preload: after it, a run's start imports none of trainmeter's modules (nor psutil) ---------
_SRC = Path(__file__).parents[1] / "src"

PROBE = """
import json, sys, tempfile
import torch
{preload}
import trainmeter as tm
before = set(sys.modules)
model, x = torch.nn.Linear(2, 1), torch.randn(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with tm.monitor(name="probe", run_dir=tempfile.mkdtemp(), interval_s=3600) as run:
    started = sorted(set(sys.modules) - before)
    for _ in range(3):
        model(x).sum().backward(); opt.step(); opt.zero_grad()
    before = set(sys.modules)
    run.steps_state.next_report_s = 0.0
    run.maybe_report()
    reported = sorted(set(sys.modules) - before)
    model(x).sum().backward(); opt.step()
    before = set(sys.modules)
finished = sorted(set(sys.modules) - before)
print(json.dumps({{"started": started, "reported": reported, "finished": finished,
                  "torch_at_preload": {torch_check}}}))
"""


def _start_imports(preload: bool) -> dict:
    code = PROBE.format(
        preload="from trainmeter.extensions import preload; failed = preload()" if preload else "failed = []",
        torch_check="True")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(_SRC), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_after_the_preload_a_runs_start_imports_no_module_of_ours_or_psutil():
    cold = [m for m in _start_imports(preload=False)["started"] if m.startswith(("trainmeter", "psutil"))]
    warm = [m for m in _start_imports(preload=True)["started"] if m.startswith(("trainmeter", "psutil"))]
    assert len(cold) > 30  # without it, the start imports the wings (the probe measures what it should)
    assert warm == []


def test_after_the_preload_a_runs_first_report_and_finish_import_no_module_of_ours():
    ours = ("trainmeter", "psutil")
    cold, warm = _start_imports(preload=False), _start_imports(preload=True)
    assert [m for m in cold["reported"] + cold["finished"] if m.startswith(ours)]  # the probe sees the imports
    assert [m for m in warm["reported"] + warm["finished"] if m.startswith(ours)] == []


def test_the_preload_imports_no_torch_and_reports_no_failure():
    code = ("import sys; from trainmeter.extensions import preload; failed = preload(); "
            "import threading; print(failed, 'torch' in sys.modules, "
            "[t.name for t in threading.enumerate() if t.name.startswith('trainmeter')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(_SRC), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] False []"


THREADS_PROBE = """
import json, sys, tempfile, threading
import torch
import trainmeter as tm

seen, after_start = [], []


class Finder:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("trainmeter") and after_start:
            seen.append([name, threading.current_thread().name])
        return None


sys.meta_path.insert(0, Finder())
model, x = torch.nn.Linear(2, 1), torch.randn(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with tm.monitor(name="probe", run_dir=tempfile.mkdtemp(), interval_s=3600) as run:
    run.worker.drain()
    after_start.append(True)  # the start's imports (the GPU opener's thread included) are another matter
    for _ in range(3):
        model(x).sum().backward(); opt.step(); opt.zero_grad()
    run.steps_state.next_report_s = 0.0
    run.maybe_report()
    run.worker.drain()
print(json.dumps(seen))
"""


def test_no_thread_of_ours_imports_a_module_of_ours_at_a_cold_runs_first_report_or_finish():
    done = subprocess.run([sys.executable, "-c", THREADS_PROBE], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(_SRC), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(name.startswith("trainmeter.widget") for name, _ in seen)  # the finish's imports were seen
    ours = [(name, thread) for name, thread in seen if thread.startswith("trainmeter")]
    assert [(name, thread) for name, thread in ours if thread != "trainmeter-gpu-open"] == []  # the GPU wing's opener
    # imports its backends at start, on its own thread, when %load_ext did not
