"""Post-import hooks: every hook of the process shares one ``sys.meta_path`` finder; an unwatched import costs it one
dict lookup."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

import trainmeter
from trainmeter.core.patches import FINDER, ImportFinder, PostImportHooks

SRC = str(Path(trainmeter.__file__).parent)


def _ours() -> list[object]:
    return [f for f in sys.meta_path if type(f).__module__.startswith("trainmeter")]


@pytest.fixture
def fake_module(tmp_path, monkeypatch):
    (tmp_path / "tm_watched_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "tm_watched_mod"
    sys.modules.pop("tm_watched_mod", None)


def test_two_hooks_share_one_finder_which_leaves_with_the_last(fake_module):
    seen: list[tuple[str, int]] = []
    first = PostImportHooks({fake_module: lambda m: seen.append(("first", m.VALUE))})
    second = PostImportHooks({fake_module: lambda m: seen.append(("second", m.VALUE)), "json": lambda m: None})
    first.install()
    second.install()
    assert _ours() == [FINDER] and FINDER.watched[fake_module] and "json" in FINDER.watched
    import tm_watched_mod  # noqa: F401

    assert seen == [("first", 1), ("second", 1)]  # in the order installed, once each
    assert type(sys.modules[fake_module].__loader__).__name__ == "SourceFileLoader"
    first.remove()
    assert _ours() == [FINDER] and "json" in FINDER.watched
    second.remove()
    second.remove()  # idempotent
    assert _ours() == [] and FINDER.watched == {}


def test_a_module_already_imported_is_called_back_at_install_and_the_switch_keeps_the_finder_out(monkeypatch):
    seen: list[str] = []
    monkeypatch.setenv("TRAINMETER_DISABLE", "import-hooks")
    hooks = PostImportHooks({"json": lambda m: seen.append(m.__name__)})
    hooks.install()
    assert seen == ["json"] and _ours() == []
    hooks.remove()


def _calls_of_ours(fn) -> list[str]:
    """The Python functions of trainmeter's source entered while ``fn`` runs."""
    calls: list[str] = []

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(SRC):
            calls.append(getattr(frame.f_code, "co_qualname", frame.f_code.co_name))  # (3.10: no co_qualname)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_run_with_every_default_wing_holds_one_finder_and_an_unwatched_lookup_runs_only_its_find_spec(run_root):
    torch = pytest.importorskip("torch")
    import trainmeter as tm

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tm.monitor(run_dir=run_root, interval_s=3600):
        for _ in range(2):
            model(torch.randn(3, 2)).sum().backward()
            opt.step()
            opt.zero_grad()
        held = _ours()
        # accelerate asks for an optional package at each step: one call of ours, the finder's, per lookup
        calls = _calls_of_ours(lambda: importlib.util.find_spec("lomo_optim_not_installed"))
        watched = len(FINDER.watched)
    assert held == [FINDER] and isinstance(FINDER, ImportFinder)
    assert watched > 10  # the integration wing's, the time split's, the optimizer wing's and the probes' modules
    assert calls in (["ImportFinder.find_spec"], ["find_spec"])
    assert _ours() == []
