"""The host-patch list (core/host_patches.py): every patch site in the code is listed, checks, the kill switch."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from trainmeter.core import host_patches
from trainmeter.core.host_patches import PATCHES, check, compile_flag_owner, disabled, resolve

SRC = Path(__file__).resolve().parents[2] / "src" / "trainmeter"
JS = SRC.parents[1] / "js" / "src"
HOOK_CALLS = {"register_at_fork", "register_after_fork", "register_optimizer_step_post_hook",
              "register_optimizer_step_pre_hook", "on_recv"}
FOREIGN_ROOTS = {"torch", "sys", "os", "signal", "builtins", "multiprocessing", "threading", "cls", "kernel", "module",
                 "thread"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


def code_sites() -> set[str]:
    """``<file>:<site>`` for every place src/ patches or hooks code it does not own."""
    found: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "core/host_patches.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in HOOK_CALLS:
                found.add(f"{rel}:{node.func.id}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr, receiver = node.func.attr, ast.unparse(node.func.value)
                if attr in ("wrap", "set") and "patches" in receiver and len(node.args) >= 2:
                    found.add(f"{rel}:{_name(node.args[0])}.{_name(node.args[1])}")
                elif attr in HOOK_CALLS:
                    found.add(f"{rel}:{attr}")
                elif attr == "register" and receiver.endswith("events"):
                    found.add(f"{rel}:events.register")  # IPython's event callbacks
                elif attr == "signal" and receiver == "signal":
                    found.add(f"{rel}:signal.signal")
                elif attr in ("insert", "append", "remove") and receiver == "sys.meta_path":
                    found.add(f"{rel}:sys.meta_path")
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    text = ast.unparse(target)
                    if isinstance(target, ast.Attribute) and text.split(".", 1)[0] in FOREIGN_ROOTS:
                        found.add(f"{rel}:{text}")
    return found


def listed_sites() -> set[str]:
    return {site for patch in PATCHES for site in patch.sites}


def test_every_patch_site_in_the_code_is_listed() -> None:
    unlisted = code_sites() - listed_sites()
    assert not unlisted, f"add these to core/host_patches.PATCHES: {sorted(unlisted)}"


def test_every_listed_site_is_still_in_the_code() -> None:
    python = {s for s in listed_sites() if not s.startswith("../")}
    stale = python - code_sites()
    assert not stale, sorted(stale)
    assert (SRC.parent / "trainmeter-autostart.pth").exists()
    assert "outputs" in (JS / "reattach.ts").read_text(encoding="utf-8")


def test_the_front_end_never_writes_a_cells_trust() -> None:
    for path in JS.rglob("*.ts"):
        assert not re.search(r"\.trusted\s*=(?!=)", path.read_text(encoding="utf-8")), path.name


def test_each_entry_has_a_key_what_it_touches_and_an_uninstall_path() -> None:
    keys = [p.key for p in PATCHES]
    assert len(keys) == len(set(keys))
    for patch in PATCHES:
        assert re.fullmatch(r"[a-z][a-z-]+", patch.key) and patch.touches and patch.uninstall and patch.sites


def test_the_kill_switch_reads_comma_separated_keys() -> None:
    assert disabled({"TRAINMETER_DISABLE": " reload, autostart ,,COMPILE-WATCH"}) == {
        "reload", "autostart", "compile-watch"}
    assert disabled({}) == frozenset()


def test_an_unknown_key_is_named_with_the_valid_ones() -> None:
    with pytest.warns(RuntimeWarning) as caught:
        assert disabled({"TRAINMETER_DISABLE": "reload,relaod"}) == {"reload"}
    message = str(caught[0].message)
    assert "'relaod'" in message and all(p.key in message for p in PATCHES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        disabled({"TRAINMETER_DISABLE": "reload,relaod"})  # said once per value


def test_a_switched_off_entry_is_refused_at_install_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMETER_DISABLE", "taps")
    said: list[str] = []
    assert not host_patches.allow("taps", lambda key, message: said.append(message))
    assert host_patches._refused.get("taps") == "switched off by TRAINMETER_DISABLE" and said == []
    monkeypatch.delenv("TRAINMETER_DISABLE")
    assert host_patches.allow("taps") and host_patches._refused.get("taps") is None


def test_a_missing_private_name_refuses_that_entry_once_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.delattr(torch.amp.grad_scaler.GradScaler, "scale")
    said: list[tuple[str, str]] = []
    assert not host_patches.allow("grad-scaler", lambda key, message: said.append((key, message)))
    assert said == [("host-patch-grad-scaler", "grad-scaler is not installed: "
                     "torch.amp.grad_scaler.GradScaler.scale not found in this version")]
    assert host_patches.allow("backward")


def test_names_of_modules_not_imported_are_checked_later_and_never_imported() -> None:
    assert resolve("not_a_module_here.x", {}) is None
    assert resolve("os.path.join") is True and resolve("os.no_such_name") is False
    modules = {"torch": object()}
    assert check("compile-watch", modules).ok is False  # the fake torch has no _dynamo attribute


def test_without_the_private_compile_flag_the_public_check_stands_in() -> None:
    class Compiler:  # a torch.compiler that renamed the private flag
        def __init__(self) -> None:
            self.compiling = False

        def is_compiling(self) -> bool:
            return self.compiling

    said: list[str] = []
    compiler = Compiler()
    owner = compile_flag_owner(compiler, lambda key, message: said.append(message))
    assert owner._is_compiling_flag is False
    compiler.compiling = True
    assert owner._is_compiling_flag is True
    assert said and "torch.compiler.is_compiling()" in said[0]
    assert "torch.compiler.is_compiling()" in (host_patches._refused.get("call-wrapper") or "")
    present = type("WithFlag", (), {"_is_compiling_flag": False})()
    assert compile_flag_owner(present) is present and host_patches._refused.get("call-wrapper") is None


def test_training_runs_and_counts_batches_when_torch_has_no_private_compile_flag(
        run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import trainmeter as tm

    monkeypatch.delattr(torch.compiler, "_is_compiling_flag")  # a torch that renamed it, its own check too
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="is_compiling"):
        with tm.monitor(name="noflag", run_dir=run_root) as m:
            for _ in range(3):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
    assert m.steps == 3 and m.tokens == 6


def test_switching_off_the_call_wrapper_leaves_model_classes_untouched(
        run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import trainmeter as tm

    monkeypatch.setenv("TRAINMETER_DISABLE", "call-wrapper")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(name="nocall", run_dir=run_root) as m:
        assert "__call__" not in vars(torch.nn.Linear)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        assert "__call__" not in vars(torch.nn.Linear)
    assert m.steps == 1
