"""Session fixtures for the real-browser tests: one JupyterLab 4 and one Notebook 7 server (each started
once, on first use), one headless Debian chromium, all in an isolated HOME under a temporary directory.

Every fixture skips (with the reason) when chromium, playwright, jupyterlab or notebook is missing.
Figures the tests measure are collected in ``browser_figures`` and written to
``test-artifacts/browser/figures.json`` at the end of the session.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import (
    ARTIFACTS,
    VIEWPORT,
    JupyterServer,
    isolated_env,
    launch_browser,
    missing_requirements,
)


class ServerPool:
    """Starts each kind of server once, on first use; stops them all at the end."""

    def __init__(self, root_dir: Path, env: dict[str, str], log_dir: Path) -> None:
        self.root_dir = root_dir
        self.env = env
        self.log_dir = log_dir
        self._servers: dict[str, JupyterServer] = {}

    def get(self, kind: str) -> JupyterServer:
        """The running server of ``kind`` (``lab`` or ``notebook``)."""
        server = self._servers.get(kind)
        if server is None:
            server = JupyterServer(kind, self.root_dir, self.env, self.log_dir / f"{kind}-server.log")
            server.start()
            self._servers[kind] = server
        return server

    def stop_all(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()


@pytest.fixture(scope="session")
def browser_stack() -> None:
    reason = missing_requirements()
    if reason is not None:
        pytest.skip(f"browser tests need the browser stack: {reason}")


@pytest.fixture(scope="session")
def browser_env(browser_stack: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return isolated_env(tmp_path_factory.mktemp("jupyter-env"))


@pytest.fixture(scope="session")
def notebook_root(browser_stack: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notebooks")


@pytest.fixture(scope="session")
def servers(browser_env: dict[str, str], notebook_root: Path) -> Iterator[ServerPool]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pool = ServerPool(notebook_root, browser_env, ARTIFACTS)
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session")
def browser(browser_env: dict[str, str]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_browser(playwright, browser_env)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def browser_figures() -> Iterator[dict[str, Any]]:
    figures: dict[str, Any] = {}
    yield figures
    if figures:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "figures.json").write_text(json.dumps(figures, indent=2, sort_keys=True))


@pytest.fixture
def new_page(browser: Any) -> Iterator[Callable[[], Any]]:
    """A factory of pages, each in its own browser context (closed after the test)."""
    contexts: list[Any] = []

    def make() -> Any:
        context = browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        return page

    yield make
    for context in contexts:
        context.close()
