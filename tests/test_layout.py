"""The package layout shows the architecture: core imports no wing; record reads the run through a Protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import trainmeter

PKG = Path(trainmeter.__file__).parent
WINGS = ("compute", "gpu", "host", "ranks", "record", "taps", "timesplit", "widget")


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path`` (lazy and TYPE_CHECKING ones too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module == "trainmeter":
                out.update(f"trainmeter.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_core_imports_no_module_outside_core():
    offenders = {
        f"{path.relative_to(PKG)} -> {mod}"
        for path in (PKG / "core").glob("*.py")
        for mod in _imports(path)
        if mod.startswith("trainmeter") and not mod.startswith("trainmeter.core")
    }
    assert offenders == set()


def test_record_never_imports_the_monitor():
    offenders = {
        f"{path.relative_to(PKG)} -> {mod}"
        for path in (PKG / "record").glob("*.py")
        for mod in _imports(path)
        if mod in ("trainmeter.core.monitor", "trainmeter.core.probes")
    }
    assert offenders == set()


def test_every_extension_wing_has_an_extension_module_with_start_and_stop():
    for wing in ("compute", "gpu", "host", "ranks", "taps", "timesplit"):
        tree = ast.parse((PKG / wing / "extension.py").read_text(encoding="utf-8"))
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        methods = {f.name for c in classes for f in c.body if isinstance(f, ast.FunctionDef)}
        assert {"start", "stop"} <= methods, wing


def test_no_module_is_left_at_the_top_besides_the_face_and_the_wiring():
    top = {p.stem for p in PKG.glob("*.py")}
    assert top == {"__init__", "_version", "api", "magic", "options", "sizes", "extensions", "checkup"}
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {"core", *WINGS}
