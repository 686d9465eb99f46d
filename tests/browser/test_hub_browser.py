"""The live widget under a real JupyterHub: login, spawn, JupyterLab under ``/user/<name>/``.

A JupyterHub (dummy authenticator, ``SimpleLocalProcessSpawner``, configurable-http-proxy, all on 127.0.0.1,
state in a pytest tmp dir; tests/browser/hub_harness.py) serves one user. Chromium logs in through the hub's
form, the hub spawns the user's server and redirects to a notebook that trains a tiny CPU model for a few
seconds under ``%%trainmeter``. The page is read while the cell runs; every request the page made is checked
to have stayed under the hub's prefixes and to have succeeded (a base-URL bug in an asset or file link
shows as a request to ``/lab/...`` or ``/files/...`` outside ``/user/<name>/``, or as a 404).

Skipped (with the reason) when jupyterhub, configurable-http-proxy or node is missing, except under CI=true,
where ``./dev test`` installs them and a missing piece fails the test.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.browser.hub_harness import JupyterHub, log_in, missing_hub_requirements
from tests.browser.jupyter_harness import (
    ARTIFACTS,
    VIEWPORT,
    read_page,
    run_all_cells,
    screenshot,
    wait_until_ready,
    write_notebook,
)

pytestmark = pytest.mark.browser

USER = "alice"
TRAIN_S = 6
SAMPLE_EVERY_MS = 400
CELL_DEADLINE_S = TRAIN_S + 40
NB_NAME = "hub-live.ipynb"
SETUP_CELL = """\
%load_ext trainmeter
import time
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))"""
TRAIN_CELL = f"""\
%%trainmeter --name hub-run --interval 2 --dir runs
t_end = time.perf_counter() + {TRAIN_S}
while time.perf_counter() < t_end:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()"""
DONE_PROMPT = re.compile(r"^\[\d+\]:?$")


@dataclass
class HubRun:
    """What the hub's JupyterLab showed while the training cell ran."""

    hub: JupyterHub
    page_url: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[int, str]] = field(default_factory=list)
    login_to_ready_s: float = 0.0
    links: list[dict[str, str]] = field(default_factory=list)
    link_status: dict[str, int] = field(default_factory=dict)

    def running(self) -> list[dict[str, Any]]:
        return [s for s in self.samples if len(s["prompts"]) > 1 and s["prompts"][1].startswith("[*]")
                and s["widgets"] > 0 and s["step"] is not None]


@pytest.fixture(scope="module")
def hub(browser_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterHub]:
    reason = missing_hub_requirements()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the JupyterHub test (./dev test installs it): {reason}")
        pytest.skip(f"the JupyterHub test needs a hub: {reason}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = JupyterHub(tmp_path_factory.mktemp("jupyterhub"), browser_env, USER, ARTIFACTS / "hub-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hub_run(hub: JupyterHub, browser: Any, browser_figures: dict[str, Any]) -> Iterator[HubRun]:
    hub.root_dir.mkdir(parents=True, exist_ok=True)
    write_notebook(hub.root_dir / NB_NAME, [SETUP_CELL, TRAIN_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    run = HubRun(hub=hub)
    page.on("response", lambda r: run.requests.append((r.status, r.url)))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        t0 = time.monotonic()
        log_in(page, hub, NB_NAME)
        page.wait_for_url(re.compile(rf"/user/{USER}/lab/"), timeout=90_000)
        wait_until_ready(page, hub, NB_NAME)
        run.login_to_ready_s = time.monotonic() - t0
        run.page_url = page.url
        screenshot(page, "hub-1-opened")
        t0 = time.monotonic()
        run_all_cells(page, 2)
        shot = False
        while time.monotonic() - t0 < CELL_DEADLINE_S:
            page.wait_for_timeout(SAMPLE_EVERY_MS)
            sample = read_page(page)
            if sample is None:
                continue
            run.samples.append(sample)
            live = run.running()
            if not shot and len(live) >= 3 and live[-1]["step"] > 0:
                shot = bool(screenshot(page, "hub-2-running"))
            if (len(sample["prompts"]) > 1 and DONE_PROMPT.match(sample["prompts"][1])
                    and sample["status"] in ("completed", "failed", "interrupted")
                    and sample["points"].get("loss", 0) > 0):
                break
        screenshot(page, "hub-3-finished")
        # the live header and the static dashboard under it link the run's files: each must stay under the prefix
        run.links = page.evaluate(
            "() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter a[href],"
            " .jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter-snapshot a[href]')]"
            ".map((a) => ({text: a.textContent, href: a.href,"
            " snapshot: !!a.closest('.trainmeter-snapshot')}))")
        run.link_status = {link["href"]: page.request.get(link["href"]).status for link in run.links
                           if link["href"].split("?")[0].endswith("passport.md")}
        browser_figures["hub.login_to_ready_s"] = round(run.login_to_ready_s, 1)
        browser_figures["hub.startup_s"] = round(hub.startup_s or 0.0, 1)
        yield run
    finally:
        context.close()
        hub.shut_down(NB_NAME)


def test_notebook_opens_in_jupyterlab_under_the_users_prefix(hub_run: HubRun) -> None:
    path = urllib.parse.urlparse(hub_run.page_url).path
    assert path.startswith(f"/user/{USER}/lab/"), hub_run.page_url


def test_step_count_rises_while_the_cell_runs(hub_run: HubRun) -> None:
    live = hub_run.running()
    assert len(live) >= 3, f"too few reads while the cell ran: {hub_run.samples[-3:]}"
    steps = [s["step"] for s in live]
    assert steps == sorted(steps) and steps[-1] > steps[0] >= 0, steps
    assert {"running"} & {s["status"] for s in live}, [s["status"] for s in live]


def test_final_view_shows_the_finished_run(hub_run: HubRun) -> None:
    last = hub_run.samples[-1]
    assert DONE_PROMPT.match(last["prompts"][1]), last["prompts"]
    assert last["status"] == "completed", last
    assert last["step"] >= max(s["step"] for s in hub_run.running())
    assert last["points"].get("loss", 0) > 0, last["points"]


def test_every_request_stays_under_the_hub_prefixes_and_succeeds(hub_run: HubRun) -> None:
    origin = urllib.parse.urlparse(hub_run.hub.hub_url).netloc
    ours = [(status, url) for status, url in hub_run.requests if urllib.parse.urlparse(url).netloc == origin]
    assert ours, "no requests recorded"
    outside = [url for _, url in ours
               if not urllib.parse.urlparse(url).path.startswith((f"/user/{USER}/", "/hub/"))]
    assert not outside, f"requests outside /user/{USER}/ and /hub/ (a base-URL bug): {outside}"
    failed = [(status, url) for status, url in ours if status >= 400]
    assert not failed, f"failed requests: {failed}"
    elsewhere = [url for _, url in hub_run.requests
                 if urllib.parse.urlparse(url).scheme in ("http", "https")
                 and urllib.parse.urlparse(url).netloc != origin]
    assert not elsewhere, f"the page reached another host: {elsewhere}"


def test_links_to_the_run_files_stay_under_the_users_prefix_and_the_passport_opens(hub_run: HubRun) -> None:
    assert any(link["snapshot"] for link in hub_run.links), f"the static dashboard links nothing: {hub_run.links}"
    for link in hub_run.links:
        path = urllib.parse.urlparse(link["href"]).path
        assert path.startswith(f"/user/{USER}/"), f"{link['text']!r} links outside the user's prefix: {link['href']}"
    assert hub_run.link_status, f"no passport.md link: {hub_run.links}"
    failed = {href: status for href, status in hub_run.link_status.items() if status != 200}
    assert not failed, f"passport.md links that do not open: {failed}"

