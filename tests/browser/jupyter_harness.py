"""Jupyter servers, a headless chromium and page helpers for the real-browser tests and benchmarks.

Follows one recipe: servers on
127.0.0.1 with a token and an isolated HOME / JUPYTER_CONFIG_DIR / JUPYTER_DATA_DIR,
quiet JupyterLab settings (no news toast, no update check, read-only extension
manager), Debian's chromium driven by Playwright (never ``playwright install``),
one workspace per page in JupyterLab, completion read from the prompt (``[*]:``),
never from the kernel's ``execution_state``.

Used by ``tests/browser/conftest.py`` and ``benchmarks/stream_browser.py``.
Nothing here is thread-safe: one test thread drives it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"
TOKEN = "trainmeter-browser-test"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1280, "height": 1000}
SERVER_START_TIMEOUT_S = 60.0
KERNEL_IDLE_TIMEOUT_S = 90.0
SERVER_CONFIG = """\
c.LabApp.news_url = None
c.LabApp.extension_manager = "readonly"
c.LanguageServerManager.autodetect = False
c.ServerApp.open_browser = False
"""
DONE = re.compile(r"^\[\d+\]:?$")  # a code cell's prompt once it ran
LIVE_READ_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const root = panel && [...panel.querySelectorAll('.trainmeter:not(.trainmeter-snapshot)')].pop();
  const prompts = panel ? [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')].map(
    (c) => (c.querySelector('.jp-InputPrompt')?.textContent || '').trim()) : [];
  if (!root) return {prompts, root: false};"""
"""The head of a page read: the shown notebook's live widget (``root``) and its cells' prompts (``prompts``); a test
appends its own reads of ``root`` and the closing brace."""
QUIET_NOTIFICATIONS = {"fetchNews": "false", "checkForUpdates": False}

# Reads the live widget of the visible notebook panel (JupyterLab and Notebook 7 alike).
# The static HTML snapshot also carries class `trainmeter` and data-tm hooks: it is excluded.
READ_PAGE_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')].map(
    (c) => (c.querySelector('.jp-InputPrompt')?.textContent || '').trim());
  const roots = [...panel.querySelectorAll('.trainmeter:not(.trainmeter-snapshot)')];
  const root = roots[roots.length - 1] || null;
  const out = {t_ms: Date.now(), prompts, widgets: roots.length, step: null, step_text: null,
               status: null, points: {}, tiles: {}, height: 0, top_charts: []};
  if (!root) return out;
  for (const tile of root.querySelectorAll('[data-tm-tile]')) {
    out.tiles[tile.dataset.tmTile] = (tile.querySelector('.tm-tile-value')?.textContent || '').trim();
  }
  out.height = root.getBoundingClientRect().height;
  out.top_charts = [...root.querySelectorAll(':scope > .tm-charts [data-tm-chart]')].map((c) => c.dataset.tmChart);
  const step = root.querySelector('[data-tm="step"]');
  if (step) {
    out.step_text = step.textContent;
    out.step = step.dataset.value != null ? Number(step.dataset.value) : null;
  }
  const status = root.querySelector('[data-tm="status"]');
  if (status) out.status = (status.textContent || '').trim();
  for (const chart of root.querySelectorAll('[data-tm-chart]')) {
    out.points[chart.dataset.tmChart] = Number(chart.dataset.tmPoints || 0);
  }
  return out;
}
"""


# The visible notebook's toolbar indicator (JupyterLab 4 and Notebook 7) once the page's session sees an idle kernel.
INDICATOR_IDLE_JS = """() => document.querySelector(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator')?.dataset.status === 'idle'"""
INDICATOR_TIMEOUT_MS = 15_000
SETTLE_MS = 250


def missing_requirements() -> str | None:
    """Why the browser tests cannot run here, or ``None`` when they can."""
    if shutil.which("chromium") is None:
        return "chromium is not on PATH (Debian: apt-get install chromium)"
    for module, what in (("playwright.sync_api", "playwright"), ("jupyterlab", "jupyterlab"),
                         ("notebook", "notebook"), ("anywidget", "anywidget"), ("nbformat", "nbformat")):
        try:
            __import__(module)
        except ImportError:
            return f"{what} is not installed (pip install -e '.[test,browser]')"
    if not (REPO / "src" / "trainmeter" / "static" / "widget.js").is_file():
        return "the widget bundle is not built (cd js && npm run build)"
    return None


def isolated_env(base: Path) -> dict[str, str]:
    """An environment whose HOME and Jupyter dirs live under ``base``, with quiet JupyterLab settings."""
    dirs = {name: base / name for name in ("home", "jupyter-config", "jupyter-data", "jupyter-runtime",
                                           "lab-settings", "lab-workspaces", "ipython")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    (dirs["jupyter-config"] / "jupyter_server_config.py").write_text(SERVER_CONFIG)
    notif = dirs["lab-settings"] / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notif.parent.mkdir(parents=True, exist_ok=True)
    notif.write_text(json.dumps(QUIET_NOTIFICATIONS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
    env.update(HOME=str(dirs["home"]), JUPYTER_CONFIG_DIR=str(dirs["jupyter-config"]),
               JUPYTER_DATA_DIR=str(dirs["jupyter-data"]), JUPYTER_RUNTIME_DIR=str(dirs["jupyter-runtime"]),
               JUPYTERLAB_SETTINGS_DIR=str(dirs["lab-settings"]),
               JUPYTERLAB_WORKSPACES_DIR=str(dirs["lab-workspaces"]), IPYTHONDIR=str(dirs["ipython"]),
               XDG_CONFIG_HOME=str(dirs["home"] / ".config"), XDG_CACHE_HOME=str(dirs["home"] / ".cache"),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server started as a child process with its log in ``log_path`` (``proc`` set by ``start``)."""

    proc: subprocess.Popen[bytes] | None = None
    log_path: Path

    def stop(self) -> None:
        """SIGTERM (a Jupyter server shuts its kernels down), then kill after 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class JupyterServer(ServerProcess):
    """One ``jupyter lab`` (kind ``lab``) or ``jupyter notebook`` (kind ``notebook``) server.

    Args:
        kind: ``lab`` or ``notebook``.
        root_dir: The server's notebook directory (kernels start there).
        env: The isolated environment from :func:`isolated_env`.
        log_path: Where the server's stdout and stderr go.
    """

    def __init__(self, kind: str, root_dir: Path, env: dict[str, str], log_path: Path) -> None:
        self.kind = kind
        self.root_dir = root_dir
        self.env = env
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    def start(self) -> JupyterServer:
        """Start the server and wait until ``/api/status`` answers.

        Raises:
            RuntimeError: When it exits or does not answer within the timeout (the log tail is quoted).
        """
        module = "jupyterlab" if self.kind == "lab" else "notebook"
        cmd = [sys.executable, "-m", module, "--no-browser", "--allow-root", "--ip=127.0.0.1",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
               f"--ServerApp.root_dir={self.root_dir}"]
        t0 = time.monotonic()
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root_dir, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        while time.monotonic() - t0 < SERVER_START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{module} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("/api/status")
                self.startup_s = time.monotonic() - t0
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{module} did not answer in {SERVER_START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def api(self, path: str, method: str = "GET", timeout_s: float = 10.0) -> Any:
        """JSON from a REST call (the token is added)."""
        sep = "&" if "?" in path else "?"
        req = urllib.request.Request(f"{self.base_url}{path}{sep}token={TOKEN}", method=method)
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def notebook_url(self, nb_name: str, workspace: str | None = None) -> str:
        """The page that opens ``nb_name`` (a unique JupyterLab workspace each call unless given)."""
        quoted = urllib.parse.quote(nb_name)
        if self.kind == "lab":
            ws = workspace or f"tm-{uuid.uuid4().hex[:10]}"
            return f"{self.base_url}/lab/workspaces/{ws}/tree/{quoted}?token={TOKEN}"
        return f"{self.base_url}/notebooks/{quoted}?token={TOKEN}"

    def kernel_of(self, nb_name: str) -> dict[str, Any] | None:
        """The kernel model of ``nb_name``'s session, if one is open."""
        for session in self.api("/api/sessions") or []:
            if session.get("path") == nb_name and session.get("kernel"):
                return session["kernel"]
        return None

    def shut_down(self, nb_name: str) -> None:
        """Close ``nb_name``'s session and its kernel (a test module's notebook, when it is done)."""
        kernel = self.kernel_of(nb_name)
        for session in self.api("/api/sessions") or []:
            if kernel and session.get("kernel", {}).get("id") == kernel.get("id"):
                self.api(f"/api/sessions/{urllib.parse.quote(session['id'])}", method="DELETE")

    def wait_kernel_idle(self, nb_name: str, timeout_s: float = KERNEL_IDLE_TIMEOUT_S) -> None:
        """Wait until ``nb_name``'s kernel is idle with a connected page (after opening it, before running).

        Raises:
            TimeoutError: With the last kernel model seen.
        """
        deadline = time.monotonic() + timeout_s
        kernel = None
        while time.monotonic() < deadline:
            kernel = self.kernel_of(nb_name)
            if kernel and kernel.get("execution_state") == "idle" and int(kernel.get("connections") or 0) > 0:
                return
            time.sleep(0.25)
        raise TimeoutError(f"kernel of {nb_name} not idle after {timeout_s:.0f} s: {kernel}\n{self.log_tail()}")

    def read_notebook(self, nb_name: str) -> dict[str, Any] | None:
        """The notebook as saved (``None`` while the file is mid-write: the API answers 400 then)."""
        try:
            model = self.api(f"/api/contents/{urllib.parse.quote(nb_name)}?content=1&type=notebook")
        except (urllib.error.HTTPError, json.JSONDecodeError):
            return None
        return model.get("content") if isinstance(model, dict) else None


def launch_browser(playwright: Any, env: dict[str, str]) -> Any:
    """Debian's chromium, headless, through Playwright (a fresh temporary profile)."""
    return playwright.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                      args=CHROMIUM_ARGS, env=env, timeout=60_000)


def write_notebook(path: Path, cells: list[str]) -> Path:
    """Write a notebook of code cells (python3 kernel) to ``path``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def read_page(page: Any) -> dict[str, Any] | None:
    """What the visible notebook shows now: prompts, widget step, status and chart point counts."""
    return page.evaluate(READ_PAGE_JS)


def open_notebook(page: Any, server: JupyterServer, nb_name: str) -> None:
    """Open ``nb_name`` and wait until its first cell is editable and its kernel is idle."""
    page.on("dialog", lambda dialog: dialog.accept())  # a beforeunload prompt must not block a reload
    page.goto(server.notebook_url(nb_name), wait_until="domcontentloaded", timeout=90_000)
    wait_until_ready(page, server, nb_name)


def wait_until_ready(page: Any, server: JupyterServer, nb_name: str) -> None:
    """Wait for the visible notebook's first editor, an idle kernel (the server's view) and the page's own
    kernel indicator reading idle (its session is connected), then a moment to settle.

    A page without the toolbar's execution indicator settles for a second instead.
    """
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputArea-editor:visible").first.wait_for(
        timeout=90_000)
    try:
        server.wait_kernel_idle(nb_name, KERNEL_IDLE_TIMEOUT_S / 2)
    except TimeoutError:  # a kernel left "starting" by a zmq message its session rejects ("Invalid Signature", a
        # port another test's kernel used): restart it once through the server's API, as a user would
        kernel = server.kernel_of(nb_name)
        if kernel is None:
            raise
        server.api(f"/api/kernels/{kernel['id']}/restart", method="POST", timeout_s=60.0)
        server.wait_kernel_idle(nb_name)
    try:
        page.wait_for_function(INDICATOR_IDLE_JS, timeout=INDICATOR_TIMEOUT_MS, polling=100)
    except Exception:  # playwright's TimeoutError: no indicator on this page
        page.wait_for_timeout(1000)
        return
    page.wait_for_timeout(SETTLE_MS)


def run_all_cells(page: Any, n_cells: int) -> None:
    """Run the visible notebook's cells one after another with Shift+Enter (queued in the kernel)."""
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputArea-editor:visible").first.click()
    for _ in range(n_cells):
        page.keyboard.press("Shift+Enter")
        page.wait_for_timeout(150)


def save_notebook(page: Any, server: JupyterServer, nb_name: str, saved: Any, timeout_s: float = 60.0
                  ) -> dict[str, Any]:
    """Ctrl+S, then poll ``/api/contents`` until ``saved(notebook)`` holds; returns the saved notebook.

    Raises:
        TimeoutError: When the saved file never satisfies ``saved``.
    """
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + timeout_s
    retried = False
    while time.monotonic() < deadline:
        nb = server.read_notebook(nb_name)
        if nb is not None and saved(nb):
            return nb
        if not retried and time.monotonic() > deadline - timeout_s / 2:
            page.keyboard.press("Control+s")  # a keypress lost to focus changes: once more
            retried = True
        page.wait_for_timeout(250)
    raise TimeoutError(f"{nb_name} was not saved with the expected outputs in {timeout_s:.0f} s")


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _html_text(output: dict[str, Any]) -> str:
    html = (output.get("data") or {}).get("text/html") or ""
    return "".join(html) if isinstance(html, list) else str(html)


def widget_outputs(nb: dict[str, Any]) -> list[dict[str, Any]]:
    """The saved outputs that hold the dashboard: a widget view, or the static dashboard that replaces it."""
    out = []
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            if WIDGET_VIEW in (output.get("data") or {}) or "trainmeter-snapshot" in _html_text(output):
                out.append(output)
    return out


def screenshot(page: Any, name: str) -> Path:
    """Save the page, and the live widget when shown, under test-artifacts/browser/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    widget = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)").last
    try:
        if widget.count():
            widget.scroll_into_view_if_needed(timeout=5_000)
            widget.screenshot(path=str(ARTIFACTS / f"{name}-widget.png"), timeout=10_000)
    except Exception:
        pass  # the page shot below still records the state
    page.screenshot(path=str(path), timeout=20_000)
    return path
