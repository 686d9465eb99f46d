"""The live widget in a marimo notebook: ``marimo edit`` headless on 127.0.0.1 (no token), Debian's chromium.

A generated marimo notebook trains a tiny CPU model for a few seconds under
``with tm.monitor(widget=True)`` and, in the next cell, replays the saved run with ``tm.display(run)``.
Chromium opens the notebook, presses marimo's "run all stale cells" button and reads the widgets every
0.4 s (marimo draws an anywidget inside a shadow root: the read walks shadow roots). Screenshots go to
``test-artifacts/browser/marimo-*.png``.

Skipped (with the reason) when marimo is missing, except under CI=true, where ``./dev test`` installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS, SERVER_START_TIMEOUT_S, VIEWPORT, ServerProcess, free_port

pytestmark = pytest.mark.browser

TRAIN_S = 6
SAMPLE_EVERY_MS = 400
RUN_DEADLINE_S = TRAIN_S + 60
NOTEBOOK = '''\
import marimo

app = marimo.App()


@app.cell
def _():
    import time
    import torch
    import torch.nn.functional as F
    import trainmeter as tm
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    return F, model, opt, time, tm, x, y


@app.cell
def _(F, model, opt, time, tm, x, y):
    with tm.monitor(name="marimo-run", widget=True, interval_s=2, run_dir={run_dir!r}) as run:
        _t_end = time.perf_counter() + {train_s}
        while time.perf_counter() < _t_end:
            _loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            _loss.backward()
            opt.step()
    run_dir = run.run_dir
    return (run_dir,)


@app.cell
def _(run_dir, tm):
    tm.display(tm.load(run_dir))
    return


if __name__ == "__main__":
    app.run()
'''
# every trainmeter root in the page, shadow roots included, in document order
READ_WIDGETS_JS = """
() => {
  const roots = [];
  const walk = (node) => {
    for (const el of node.querySelectorAll('*')) {
      if (el.classList.contains('trainmeter') && !el.classList.contains('trainmeter-snapshot')) roots.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return {t_ms: Date.now(), widgets: roots.map((root) => {
    const step = root.querySelector('[data-tm="step"]');
    const points = {};
    for (const chart of root.querySelectorAll('[data-tm-chart]')) points[chart.dataset.tmChart] = Number(chart.dataset.tmPoints || 0);
    return {step: step && step.dataset.value != null ? Number(step.dataset.value) : null,
            status: (root.querySelector('[data-tm="status"]')?.textContent || '').trim(),
            name: (root.querySelector('.tm-name, [data-tm="name"]')?.textContent || '').trim(),
            points, height: root.getBoundingClientRect().height, width: root.clientWidth,
            clipped: [...root.querySelectorAll('.tm-header > *, .tm-tile-value, .tm-tile-label-text')]
              .filter((e) => !e.closest('[hidden]') && e.scrollWidth > e.clientWidth + 1)
              .map((e) => e.className + ': ' + e.textContent)};
  })};
}
"""


def missing_marimo() -> str | None:
    """Why marimo cannot run here, or ``None``."""
    try:
        import marimo  # noqa: F401
    except ImportError:
        return "marimo is not installed (pip install -e '.[browser]')"
    return None


@dataclass
class MarimoRun:
    """What the marimo page showed while the notebook ran."""

    base_url: str
    run_root: Path
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[int, str]] = field(default_factory=list)

    def live(self) -> list[dict[str, Any]]:
        """The first widget (the training cell's) while it said ``running``."""
        return [s["widgets"][0] for s in self.samples
                if s["widgets"] and s["widgets"][0]["status"] == "running" and s["widgets"][0]["step"] is not None]


class MarimoServer(ServerProcess):
    """``marimo edit NOTEBOOK --headless`` on 127.0.0.1, no token, in the isolated environment."""

    def __init__(self, notebook: Path, env: dict[str, str], log_path: Path) -> None:
        self.notebook = notebook
        self.env = env
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MarimoServer:
        cmd = [sys.executable, "-m", "marimo", "-y", "edit", str(self.notebook), "--headless", "--host", "127.0.0.1",
               "--port", str(self.port), "--no-token", "--skip-update-check"]
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=self.notebook.parent, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        t0 = time.monotonic()
        while time.monotonic() - t0 < SERVER_START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"marimo exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                urllib.request.urlopen(f"{self.base_url}/health", timeout=2).close()
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"marimo did not answer in {SERVER_START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")


def _shot(page: Any, name: str, index: int) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    widget = page.locator(".trainmeter:not(.trainmeter-snapshot)").nth(index)  # Playwright's CSS pierces shadow roots
    try:
        widget.scroll_into_view_if_needed(timeout=5_000)
        widget.screenshot(path=str(ARTIFACTS / f"{name}-widget.png"), timeout=10_000)
    except Exception:
        pass  # the page shot still records the state
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), timeout=20_000)


def _run_stale_cells(run_all: Any, timeout_s: float = 60.0) -> None:
    """Press "run all stale cells" until marimo takes it (a click before the kernel connects is lost).

    The button turns yellow once the kernel reports the cells stale, and grey once they are queued.
    """
    def stale() -> bool:
        return "yellow" in (run_all.get_attribute("class") or "").split()

    deadline = time.monotonic() + timeout_s
    while not stale() and time.monotonic() < deadline:
        run_all.page.wait_for_timeout(250)
    while time.monotonic() < deadline:
        if not stale():
            return
        if run_all.is_enabled():
            run_all.click()
        run_all.page.wait_for_timeout(1500)
    raise TimeoutError(f"marimo did not start the notebook's cells in {timeout_s:.0f} s")


def _finished(sample: dict[str, Any]) -> bool:
    widgets = sample["widgets"]
    return (len(widgets) >= 2 and all(w["status"] == "completed" for w in widgets[:2])
            and widgets[1]["points"].get("loss", 0) > 0 and widgets[0]["points"].get("loss", 0) > 0)


@pytest.fixture(scope="module")
def marimo_run(browser_env: dict[str, str], browser: Any, tmp_path_factory: pytest.TempPathFactory,
               browser_figures: dict[str, Any]) -> Iterator[MarimoRun]:
    reason = missing_marimo()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the marimo test (./dev test installs it): {reason}")
        pytest.skip(f"the marimo test needs marimo: {reason}")
    root = tmp_path_factory.mktemp("marimo")
    notebook = root / "train.py"
    notebook.write_text(NOTEBOOK.format(run_dir=str(root / "runs"), train_s=TRAIN_S))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = MarimoServer(notebook, browser_env, ARTIFACTS / "marimo-server.log").start()
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    run = MarimoRun(base_url=server.base_url, run_root=root / "runs")
    page.on("response", lambda r: run.requests.append((r.status, r.url)))
    try:
        page.goto(server.base_url, wait_until="domcontentloaded", timeout=60_000)
        run_all = page.get_by_test_id("chrome-controls-bottom-right").get_by_test_id("run-button")
        run_all.wait_for(timeout=60_000)
        _run_stale_cells(run_all)
        t0 = time.monotonic()
        shot = False
        while time.monotonic() - t0 < RUN_DEADLINE_S:
            page.wait_for_timeout(SAMPLE_EVERY_MS)
            sample = page.evaluate(READ_WIDGETS_JS)
            run.samples.append(sample)
            if not shot and len(run.live()) >= 3 and run.live()[-1]["step"] > 0:
                _shot(page, "marimo-1-running", 0)
                shot = True
            if _finished(sample):
                break
        browser_figures["marimo.run_all_to_finished_s"] = round(time.monotonic() - t0, 1)
        page.wait_for_timeout(500)
        run.samples.append(page.evaluate(READ_WIDGETS_JS))
        _shot(page, "marimo-2-finished", 0)
        _shot(page, "marimo-3-display-run", 1)
        yield run
    finally:
        context.close()
        server.stop()


def test_monitor_widget_step_count_rises_while_the_cell_runs(marimo_run: MarimoRun) -> None:
    live = marimo_run.live()
    assert len(live) >= 3, f"too few reads of a running widget: {marimo_run.samples[-3:]}"
    steps = [w["step"] for w in live]
    assert steps == sorted(steps) and steps[-1] > steps[0] >= 0, steps
    assert max(w["points"].get("loss", 0) for w in live) > 0


def test_monitor_widget_ends_completed_with_its_charts(marimo_run: MarimoRun) -> None:
    final = marimo_run.samples[-1]["widgets"]
    assert final, marimo_run.samples[-3:]
    first = final[0]
    assert first["status"] == "completed", first
    assert first["step"] >= max(w["step"] for w in marimo_run.live())
    assert first["points"].get("loss", 0) > 0 and first["height"] > 200, first


def test_display_of_the_saved_run_renders_the_same_run(marimo_run: MarimoRun) -> None:
    final = marimo_run.samples[-1]["widgets"]
    assert len(final) == 2, f"expected the live widget and the replay, got {len(final)}"
    live, replay = final
    assert replay["status"] == "completed"
    assert replay["step"] == live["step"], (replay, live)
    assert replay["points"].get("loss", 0) > 0, replay["points"]
    assert len(list(marimo_run.run_root.glob("*-marimo-run/passport.json"))) == 1


def test_page_reaches_no_other_host(marimo_run: MarimoRun) -> None:
    origin = urllib.parse.urlparse(marimo_run.base_url).netloc
    elsewhere = [url for _, url in marimo_run.requests
                 if urllib.parse.urlparse(url).scheme in ("http", "https")
                 and urllib.parse.urlparse(url).netloc != origin]
    assert not elsewhere, f"the marimo page reached another host: {elsewhere}"
    failed = [(status, url) for status, url in marimo_run.requests if status >= 400]
    assert not failed, f"failed requests: {failed}"


def test_tiles_clip_no_text_at_marimos_default_width(marimo_run: MarimoRun) -> None:
    for widget in marimo_run.samples[-1]["widgets"]:
        assert not widget["clipped"], f"clipped text at {widget['width']} px: {widget['clipped']}"

