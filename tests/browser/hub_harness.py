"""A real JupyterHub for the browser tests: configurable-http-proxy, a dummy authenticator and a local spawner.

Everything is on 127.0.0.1: the proxy on a free port, the hub's API on another, each single-user server on a
random one. The hub's database, cookie secret, proxy token, pid file and the users' homes live in one temporary
directory. Single-user servers run as the calling user (root in CI: ``--allow-root``) with the venv's
``jupyterhub-singleuser`` and the isolated Jupyter dirs of :func:`tests.browser.jupyter_harness.isolated_env`.

A service token (scopes ``admin:users``, ``admin:servers``, ``access:servers``) lets the test read the user's
server REST API (sessions, contents) through the proxy; the browser itself logs in through the hub's login form.
Nothing here is thread-safe: one test thread drives it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.browser.jupyter_harness import REPO, SERVER_START_TIMEOUT_S, JupyterServer, free_port

HUB_DIR = REPO / "tests" / "browser" / "hub"  # package.json + package-lock.json: `npm ci` installs the proxy here
SERVICE_TOKEN = "trainmeter-hub-service-" + "0" * 16
PASSWORD = "any"  # the dummy authenticator takes any password
SPAWN_TIMEOUT_S = 90
# passed to the single-user servers (the spawner keeps only PATH, PYTHONPATH, LANG... of the hub's environment)
FORWARDED_ENV = ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                 "JUPYTERLAB_WORKSPACES_DIR", "IPYTHONDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "OMP_NUM_THREADS",
                 "PYTHONUNBUFFERED", "PYDEVD_DISABLE_FILE_VALIDATION", "PYTHONPATH")


def proxy_command() -> str | None:
    """The ``configurable-http-proxy`` executable: tests/browser/hub/node_modules first, then PATH."""
    local = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.is_file():
        return str(local)
    return shutil.which("configurable-http-proxy")


def singleuser_command() -> str | None:
    """The venv's ``jupyterhub-singleuser`` (next to this Python), else PATH's."""
    local = Path(sys.executable).parent / "jupyterhub-singleuser"
    if local.is_file():
        return str(local)
    return shutil.which("jupyterhub-singleuser")


def missing_hub_requirements() -> str | None:
    """Why a JupyterHub cannot start here, or ``None`` when it can."""
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return "jupyterhub is not installed (pip install -e '.[browser]')"
    if singleuser_command() is None:
        return "jupyterhub-singleuser is not on PATH (pip install -e '.[browser]')"
    if proxy_command() is None:
        return "configurable-http-proxy is not installed (cd tests/browser/hub && npm ci)"
    if shutil.which("node") is None:
        return "node is not on PATH (configurable-http-proxy needs it)"
    return None


def hub_config(root: Path, port: int, hub_port: int, env: dict[str, str]) -> str:
    """The ``jupyterhub_config.py`` text for a hub whose state lives under ``root``."""
    spawner_env = {k: env[k] for k in FORWARDED_ENV if k in env}
    homes = str(root / "home" / "{username}")
    lines = [
        "c = get_config()  # noqa: F821",
        "c.JupyterHub.ip = '127.0.0.1'",
        f"c.JupyterHub.port = {port}",
        "c.JupyterHub.hub_ip = '127.0.0.1'",
        f"c.JupyterHub.hub_port = {hub_port}",
        f"c.JupyterHub.db_url = {'sqlite:///' + str(root / 'jupyterhub.sqlite')!r}",
        f"c.JupyterHub.cookie_secret_file = {str(root / 'jupyterhub_cookie_secret')!r}",
        f"c.JupyterHub.pid_file = {str(root / 'jupyterhub.pid')!r}",
        "c.JupyterHub.cleanup_servers = True",
        "c.JupyterHub.authenticator_class = 'dummy'",
        "c.Authenticator.allow_all = True",
        "c.JupyterHub.spawner_class = 'simple'",
        f"c.SimpleLocalProcessSpawner.home_dir_template = {homes!r}",
        f"c.Spawner.cmd = [{singleuser_command()!r}]",
        "c.Spawner.args = ['--allow-root', '--ServerApp.port_retries=0']",
        "c.Spawner.default_url = '/lab'",
        "c.Spawner.ip = '127.0.0.1'",
        f"c.Spawner.start_timeout = {SPAWN_TIMEOUT_S}",
        f"c.Spawner.http_timeout = {SPAWN_TIMEOUT_S}",
        f"c.Spawner.environment = {spawner_env!r}",
        f"c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]",
        f"c.ConfigurableHTTPProxy.pid_file = {str(root / 'proxy.pid')!r}",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{free_port()}'",
        f"c.JupyterHub.services = [{{'name': 'trainmeter-test', 'api_token': {SERVICE_TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'trainmeter-test', 'services': ['trainmeter-test'],",
        "                            'scopes': ['admin:users', 'admin:servers', 'access:servers']}]",
    ]
    return "\n".join(lines) + "\n"


class JupyterHub(JupyterServer):
    """One JupyterHub; once a user's server runs, the inherited helpers address it under ``/user/<name>/``.

    Args:
        root: A fresh directory for the hub's state (database, cookie secret, pid files, homes, config, log).
        env: The isolated environment from :func:`~tests.browser.jupyter_harness.isolated_env`.
        user: The user the test logs in as.
    """

    def __init__(self, root: Path, env: dict[str, str], user: str, log_path: Path) -> None:
        super().__init__("lab", root / "home" / user, env, log_path)
        self.root = root
        self.user = user
        self.hub_url = self.base_url  # the proxy's public address
        self.base_url = f"{self.hub_url}/user/{user}"
        self.hub_port = free_port()
        # the proxy's own auth token goes through the environment, never the command line
        self.hub_env = dict(env, CONFIGPROXY_AUTH_TOKEN=uuid.uuid4().hex)

    def start(self) -> JupyterHub:
        """Start the hub (it starts the proxy) and wait until ``/hub/api/`` answers.

        Raises:
            RuntimeError: When it exits or does not answer within the timeout (the log tail is quoted).
        """
        self.root_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "jupyterhub_config.py"
        config.write_text(hub_config(self.root, self.port, self.hub_port, self.env))
        cmd = [sys.executable, "-m", "jupyterhub", "-f", str(config), "--no-ssl"]
        t0 = time.monotonic()
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=self.hub_env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        while time.monotonic() - t0 < SERVER_START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.hub_api("/hub/api/")
                self.startup_s = time.monotonic() - t0
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jupyterhub did not answer in {SERVER_START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM: the hub stops the users' servers (``cleanup_servers``) and its proxy; kill after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def hub_api(self, path: str, method: str = "GET", timeout_s: float = 10.0) -> Any:
        """JSON from the hub's REST API (service token in the Authorization header)."""
        return self._call(f"{self.hub_url}{path}", method, timeout_s)

    def api(self, path: str, method: str = "GET", timeout_s: float = 10.0) -> Any:
        """JSON from the user's server REST API, through the proxy (service token in the Authorization header)."""
        return self._call(f"{self.base_url}{path}", method, timeout_s)

    def _call(self, url: str, method: str, timeout_s: float) -> Any:
        req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {SERVICE_TOKEN}"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def login_url(self, nb_name: str) -> str:
        """The hub's login page, sending the user on to ``nb_name`` in JupyterLab under ``/user/<name>/``."""
        ws = f"tm-{uuid.uuid4().hex[:10]}"
        target = f"/hub/user-redirect/lab/workspaces/{ws}/tree/{urllib.parse.quote(nb_name)}"
        return f"{self.hub_url}/hub/login?next={urllib.parse.quote(target)}"

    def notebook_url(self, nb_name: str, workspace: str | None = None) -> str:
        """``nb_name`` in JupyterLab under ``/user/<name>/`` (the browser is logged in: no token in the URL)."""
        ws = workspace or f"tm-{uuid.uuid4().hex[:10]}"
        return f"{self.base_url}/lab/workspaces/{ws}/tree/{urllib.parse.quote(nb_name)}"

    def server_ready(self) -> bool:
        """Whether the user's server is up (the hub's user model says ``ready``)."""
        try:
            model = self.hub_api(f"/hub/api/users/{self.user}")
        except (OSError, urllib.error.URLError):
            return False
        server = (model or {}).get("servers", {}).get("", {})
        return bool(server.get("ready"))


def log_in(page: Any, hub: JupyterHub, nb_name: str) -> None:
    """Log in through the hub's form; the hub spawns the server and redirects to ``nb_name`` in JupyterLab."""
    page.goto(hub.login_url(nb_name), wait_until="domcontentloaded", timeout=60_000)
    page.fill("input[name=username]", hub.user)
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit], button[type=submit]")

