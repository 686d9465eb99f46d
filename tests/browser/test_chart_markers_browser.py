"""Verdict markers, the x axis control and human legends in a real browser (JupyterLab 4, chromium).

One monitored cell trains a small token model for about 8 s and adds a constant 50 to the
loss it passes to backward on three steps in a row (a loss spike the gradients never see).
The test waits for the live dashboard to draw the ``loss_spike`` marker on the loss chart,
switches the x axis to tokens, and reads the legends. Screenshots (light, dark, 700 px)
go to test-artifacts/browser/markers-*.png.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import ARTIFACTS, VIEWPORT, open_notebook, run_all_cells, write_notebook

pytestmark = pytest.mark.browser

SETUP_CELL = """\
%load_ext trainmeter
import time
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * 8, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randint(0, 100, (32, 8)), torch.randint(0, 10, (32,))
print("ready")"""
TRAIN_CELL = """\
%%trainmeter --name markers --interval 1
t_end = time.perf_counter() + 8
step = 0
while time.perf_counter() < t_end:
    loss = F.cross_entropy(model(x), y)
    if 300 <= step < 303:
        loss = loss + 50.0  # a spike in the recorded loss; the gradients are unchanged
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
step"""
LIVE = ".jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)"
READ_JS = """(sel) => {
  const roots = [...document.querySelectorAll(sel)];
  const root = roots[roots.length - 1];
  if (!root) return null;
  const loss = root.querySelector('[data-tm-chart="loss"]');
  const marker = loss && loss.querySelector('[data-tm-marker="loss_spike"]');
  return {
    status: (root.querySelector('[data-tm="status"]')?.textContent || '').trim(),
    marker: marker ? {title: marker.title, text: marker.textContent, hidden: marker.hidden,
                      width: marker.getBoundingClientRect().height} : null,
    x_label: loss ? (loss.querySelector('[data-tm="x-label"]')?.textContent || '') : null,
    x_drawn: loss ? loss.dataset.tmX : null,
    tokens_disabled: root.querySelector('[data-tm-x="tokens"]')?.disabled ?? null,
    legends: [...root.querySelectorAll('.u-legend .u-series .u-label')].map((e) => e.textContent),
  };
}"""


def _shot(page: Any, name: str) -> None:
    """Screenshot the live dashboard (re-located each try: a view re-created at the cell's end detaches)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            widget = page.locator(LIVE).last
            widget.scroll_into_view_if_needed(timeout=5_000)
            page.wait_for_timeout(600)
            widget.screenshot(path=str(ARTIFACTS / f"{name}.png"), timeout=10_000)
            return
        except Exception:
            if attempt == 2:
                raise
            page.wait_for_timeout(1000)


@pytest.fixture(scope="module")
def marked(servers: Any, browser: Any, notebook_root: Path) -> Any:
    server = servers.get("lab")
    nb_name = "markers-lab.ipynb"
    write_notebook(notebook_root / nb_name, [SETUP_CELL, TRAIN_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    reads: dict[str, Any] = {}
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 2)
        deadline = time.monotonic() + 150
        read = None
        while time.monotonic() < deadline:  # the finished run, re-mounted live, with its marker drawn
            page.wait_for_timeout(500)
            read = page.evaluate(READ_JS, LIVE)
            if read and read["status"] == "completed" and read["marker"]:
                break
        reads["step"] = read
        page.keyboard.press("Escape")
        page.keyboard.press("Control+b")  # close the file browser: the dashboard gets the width
        _shot(page, "markers-step-light")
        page.locator(LIVE).last.locator('[data-tm-x="tokens"]').click()
        page.wait_for_timeout(800)
        reads["tokens"] = page.evaluate(READ_JS, LIVE)
        _shot(page, "markers-tokens-light")
        page.locator(LIVE).last.locator('[data-tm-x="time"]').click()
        page.wait_for_timeout(800)
        reads["time"] = page.evaluate(READ_JS, LIVE)
        _shot(page, "markers-time-light")
        page.locator(LIVE).last.locator('[data-tm-x="tokens"]').click()
        page.set_viewport_size({"width": 700, "height": 900})
        page.wait_for_timeout(800)
        _shot(page, "markers-tokens-w700")
        page.set_viewport_size(VIEWPORT)
        try:  # dark theme through the Settings menu
            page.get_by_role("menuitem", name="Settings").click()
            page.get_by_text("Theme", exact=True).hover()
            page.get_by_text("JupyterLab Dark", exact=True).click()
            page.wait_for_timeout(1500)
            _shot(page, "markers-tokens-dark")
            page.locator(LIVE).last.locator('[data-tm-x="step"]').click()
            _shot(page, "markers-step-dark")
            page.get_by_role("menuitem", name="Settings").click()
            page.get_by_text("Theme", exact=True).hover()
            page.get_by_text("JupyterLab Light", exact=True).click()
        except Exception:
            pass
        yield reads
    finally:
        context.close()
        server.shut_down(nb_name)


def test_a_loss_spike_is_drawn_as_a_marker_on_the_loss_chart_with_its_sentence(marked: Any) -> None:
    read = marked["step"]
    assert read is not None and read["marker"] is not None, f"no loss_spike marker drawn: {read}"
    assert read["marker"]["text"] == "loss spike" and not read["marker"]["hidden"]
    assert "loss" in read["marker"]["title"] and "step" in read["marker"]["title"]
    assert read["x_label"] == "step"


def test_switching_the_x_axis_to_tokens_relabels_the_chart_and_keeps_the_marker(marked: Any) -> None:
    read = marked["tokens"]
    assert read["tokens_disabled"] is False
    assert read["x_drawn"] == "tokens" and read["x_label"].startswith("tokens"), read
    assert read["marker"] is not None and not read["marker"]["hidden"]
    time_read = marked["time"]
    assert time_read["x_drawn"] == "time" and time_read["x_label"].startswith("time since start"), time_read
    assert time_read["marker"] is not None


def test_legends_print_human_labels_never_raw_snake_case_names(marked: Any) -> None:
    legends = [t for t in marked["step"]["legends"] if t]
    assert legends, "no legend read"
    raw = [t for t in legends if re.search(r"[a-z]_[a-z]", t)]
    assert raw == [], f"raw series names in legends: {raw}"
