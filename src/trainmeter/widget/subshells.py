"""Kernel subshells (ipykernel 7) and JupyterLab's ``commsOverSubshells`` setting (from the files JupyterLab would read:
a remote front end's is not visible), as the doctor reports them. Never raises."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from trainmeter.checkup import Check, major_version

_LAB_SETTING = re.compile(r'"commsOverSubshells"\s*:\s*"([A-Za-z]+)"')
_MAX_SETTINGS_FILES = 200


def _lab_settings_files(env: Any) -> list[str]:
    """JupyterLab's user settings (``JUPYTERLAB_SETTINGS_DIR`` or ``~/.jupyter/lab/user-settings``) and overrides."""
    root = env.get("JUPYTERLAB_SETTINGS_DIR") or os.path.join(os.path.expanduser("~"), ".jupyter", "lab",
                                                               "user-settings")
    out = [os.path.join(sys.prefix, "share", "jupyter", "lab", "settings", "overrides.json")]
    for folder, _dirs, files in os.walk(root):
        out.extend(os.path.join(folder, f) for f in files if f.endswith(".jupyterlab-settings"))
        if len(out) > _MAX_SETTINGS_FILES:
            return out[:_MAX_SETTINGS_FILES]
    return out


def _lab_setting(paths: Sequence[str]) -> tuple[str, str] | None:
    """``(value, path)`` of the first ``commsOverSubshells`` set in ``paths``, or ``None``."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                match = _LAB_SETTING.search(fh.read(1_000_000))
        except OSError:
            continue
        if match:
            return match.group(1), path
    return None


def subshell_findings(version_of: Callable[[str], str | None], shell: Any, env: Any,
                      lab_settings: Sequence[str] | None) -> list[Check]:
    """Two findings: ``kernel subshells`` (ipykernel 7) and ``comms over subshells`` (JupyterLab's setting, searched
    in ``lab_settings``, default the user settings and this environment's overrides); ``version_of``: distribution
    name -> version or ``None``; ``env``: ``os.environ``."""
    version = version_of("ipykernel")
    major = major_version(version) if version else None
    kernel = getattr(shell, "kernel", None)
    info = getattr(kernel, "kernel_info", None)
    features = info.get("supported_features", ()) if isinstance(info, dict) else ()
    if version is None:
        sub = Check(name="kernel subshells", ok=None, detail="ipykernel not installed")
    elif major is not None and major >= 7:
        seen = "; this kernel advertises them" if "kernel subshells" in features else ""
        sub = Check(name="kernel subshells", ok=True, detail=f"ipykernel {version} supports kernel subshells{seen}")
    else:
        sub = Check(name="kernel subshells", ok=False if shell is not None else None,
                    detail=f"ipykernel {version} has no kernel subshells: widget messages wait while a cell runs",
                    fix="pip install 'ipykernel>=7', then restart the kernel")
    lab = version_of("jupyterlab")
    ok, fix = True, None
    if lab is None:
        ok, detail = None, "JupyterLab is not installed here (a remote front end's setting is not visible)"
    elif tuple(int(p) if p.isdigit() else 0 for p in [*lab.split("."), "0"][:2]) < (4, 4):
        ok, detail = None, f"JupyterLab {lab} predates comms over subshells (JupyterLab 4.4)"
    elif (found := _lab_setting(_lab_settings_files(env) if lab_settings is None else lab_settings)) is None:
        detail = (f"JupyterLab {lab}: commsOverSubshells not set here, so JupyterLab's default applies "
                  "(perCommTarget; jupyterlab#19719 proposes 'disabled')")
    elif found[0] == "disabled":
        ok, fix = False, "set commsOverSubshells to 'perCommTarget' in JupyterLab's settings"
        detail = (f"JupyterLab {lab}: commsOverSubshells is 'disabled' (in {found[1]}): widget messages wait while a "
                  "cell runs")
    else:
        detail = f"JupyterLab {lab}: commsOverSubshells is '{found[0]}' (in {found[1]})"
    return [sub, Check(name="comms over subshells", ok=ok, detail=detail, fix=fix)]
