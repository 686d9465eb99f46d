"""``trainmeter-autostart.pth``: a child of a monitored run records itself without importing trainmeter.

Each test makes a throwaway virtual environment (no pip, symlinks: a fraction of a
second) whose site-packages holds the repository's ``trainmeter-autostart.pth``
and a path file reaching this interpreter's packages, so ``python child.py``
is a real fresh interpreter whose ``site`` runs the file as an installed
wheel's would.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import trainmeter as tm

ROOT = Path(__file__).resolve().parents[2]
PTH = ROOT / "src" / "trainmeter-autostart.pth"

CHILD = """
import sys
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(7):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("CHILD", "trainmeter" in sys.modules)
"""


def make_python(tmp_path: Path, first_path: Path, *, with_packages: bool = True) -> str:
    """A venv's python whose site-packages has the autostart file; ``first_path`` goes first on sys.path."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--symlinks", str(env_dir)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    lines = [str(first_path)]
    if with_packages:
        lines += [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
    (purelib / "_00_paths.pth").write_text("\n".join(lines) + "\n")
    shutil.copy(PTH, purelib / PTH.name)
    return str(env_dir / "bin" / "python")


def run(python: str, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMETER_") and k != "PYTHONPATH"}
    return subprocess.run([python, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_subprocess_child_that_never_imports_trainmeter_takes_its_seat_with_exact_steps(tmp_path, monkeypatch):
    python = make_python(tmp_path, ROOT / "src")
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    monkeypatch.chdir(tmp_path)
    with tm.monitor(name="parent", run_dir=tmp_path / "runs", interval_s=0.1, widget=False) as m:
        done = subprocess.run([python, str(child)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "CHILD True" in done.stdout  # recorded although its code never imported trainmeter
    (seat,) = [p for p in m.run_dir.iterdir() if p.is_dir() and p.name.startswith("proc-")]
    rank_passport = json.loads((seat / "passport.json").read_text())
    assert (rank_passport["status"], rank_passport["steps"]) == ("completed", 7)
    d = json.loads((m.run_dir / "passport.json").read_text())["distributed"]
    assert d["role"] == "launch" and d["global_steps"] == 7 and [r["seat"] for r in d["ranks"]] == [seat.name]


def test_an_unrelated_process_imports_neither_trainmeter_nor_torch(tmp_path):
    python = make_python(tmp_path, ROOT / "src")
    probe = "import sys; print('trainmeter' in sys.modules, 'torch' in sys.modules)"
    assert run(python, probe).stdout.split() == ["False", "False"]
    assert run(python, probe, TRAINMETER_RUN_DIR=str(tmp_path), TRAINMETER_AUTOSTART="0").stdout.split() == [
        "False", "False"]
    assert run(python, probe, TRAINMETER_RUN_DIR=str(tmp_path)).stdout.split() == ["True", "False"]


def test_a_child_whose_trainmeter_import_fails_runs_on_with_one_warning(tmp_path):
    broken = tmp_path / "broken"
    (broken / "trainmeter").mkdir(parents=True)
    (broken / "trainmeter" / "__init__.py").write_text("raise ImportError('boom')\n")
    python = make_python(tmp_path, broken, with_packages=False)
    done = run(python, "print('still here')", TRAINMETER_RUN_DIR=str(tmp_path))
    assert done.returncode == 0 and done.stdout == "still here\n"
    assert done.stderr == ("trainmeter: this child of a monitored run is not recorded: importing trainmeter failed "
                           "(ImportError('boom'))\n")


def test_the_wheel_installs_the_file_into_site_packages():
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("[tool.hatch.build.targets.wheel.force-include]", 1)[1].split("\n[", 1)[0]
    assert '"src/trainmeter-autostart.pth" = "trainmeter-autostart.pth"' in table
    assert len(PTH.read_text().splitlines()) == 1  # site runs a .pth import line by line


@pytest.mark.skipif(not any((Path(p) / PTH.name).exists() for p in site.getsitepackages()),
                    reason="trainmeter-autostart.pth is not installed here (./dev installs it: pip install -e .)")
def test_the_installed_file_is_the_repositorys():
    installed = next(Path(p) / PTH.name for p in site.getsitepackages() if (Path(p) / PTH.name).exists())
    assert installed.read_text() == PTH.read_text()
