"""``sys.exit`` inside ``tm.monitor``: 0 and no code are ``completed``, others ``failed`` (docs/spec.md section 18)."""

from __future__ import annotations

import json

import pytest

import trainmeter as tm


def _passport(run_root):
    (path,) = run_root.glob("*/passport.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("code", [0, None, False])
def test_a_normal_exit_inside_the_run_is_completed(tmp_path, code):
    with pytest.raises(SystemExit):
        with tm.monitor(run_dir=tmp_path, name="exit") as m:
            m.on_step(10)
            raise SystemExit(code)
    passport = _passport(tmp_path)
    assert passport["status"] == "completed" and passport["error"] is None and passport["steps"] == 1


@pytest.mark.parametrize(("code", "recorded"), [(3, 3), ("bad input", "bad input")])
def test_another_exit_code_is_failed_with_the_code_in_the_passport(tmp_path, code, recorded):
    with pytest.raises(SystemExit):
        with tm.monitor(run_dir=tmp_path, name="exit"):
            raise SystemExit(code)
    passport = _passport(tmp_path)
    assert passport["status"] == "failed" and passport["exit_code"] == recorded
    assert passport["error"] == f"SystemExit: {code}"


def test_sys_exit_zero_from_a_script_is_completed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).parents[2] / "src")
    script = (f"import sys; sys.path.insert(0, {src!r}); import trainmeter as tm\n"
              f"with tm.monitor(run_dir={str(tmp_path)!r}, name='script') as m:\n"
              "    m.on_step(10)\n    sys.exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _passport(tmp_path)["status"] == "completed"
