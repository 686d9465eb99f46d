"""A resumed run's chart shows the whole training in a real browser (JupyterLab 4, chromium; docs/spec.md section
22): one cell trains steps 1-100 with ``tm.checkpoint()`` at 80 and stops; the next resumes from step 80's
checkpoint under a live widget and trains 81-200. Its loss chart draws the earlier run's loss (steps 1-80, faint,
"train loss, earlier runs") before its own (81-200): hovering the chart's left tenth reads a step of the first run. Screenshot: test-artifacts/browser/lineage-lab-widget.png."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyter_harness import VIEWPORT, open_notebook, run_all_cells, screenshot, write_notebook

pytestmark = pytest.mark.browser

SETUP_CELL = """\
import io, contextlib, tempfile, time
import torch, torch.nn as nn, torch.nn.functional as F
import trainmeter as tm
torch.set_num_threads(1)
root = tempfile.mkdtemp()
def setup(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(8 * 6, 50))
    return model, torch.optim.SGD(model.parameters(), lr=0.5)
def train(model, opt, step):
    x = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(step))
    F.cross_entropy(model(x), x[:, 0]).backward(); opt.step(); opt.zero_grad()
model, opt = setup(0)
with contextlib.redirect_stdout(io.StringIO()), tm.monitor(name="first", run_dir=root, budget_steps=200) as first:
    for step in range(1, 1001):
        train(model, opt, step)
        if step == 79: tm.checkpoint()
        if step == 99: tm.stop()
print("first", first.steps)"""
RESUME_CELL = """\
model, opt = setup(1)
with tm.monitor(name="second", run_dir=root, budget_steps=200, resume="last", widget=True, interval_s=0.5):
    saved = torch.load(first.run_dir / "checkpoints" / "step-80.pt", weights_only=True)
    model.load_state_dict(saved["model"]); opt.load_state_dict(saved["optimizer"])
    for step in range(81, 201):
        train(model, opt, step)
        time.sleep(0.02)"""
HOVER_JS = """(sel) => {
  const roots = [...document.querySelectorAll(sel)];
  const loss = roots[roots.length - 1].querySelector('[data-tm-chart="loss"]');
  const rows = [...loss.querySelectorAll('.u-legend .u-series')];
  const value = (r) => (r?.querySelector('.u-value')?.textContent || '').trim();
  return {step: value(rows[0]).replace(/,/g, ''),
          parent: value(rows.find((r) => r.textContent.includes('earlier runs')))};
}"""
LIVE = ".jp-NotebookPanel:not(.lm-mod-hidden) .trainmeter:not(.trainmeter-snapshot)"
READ_JS = """(sel) => {
  const roots = [...document.querySelectorAll(sel)];
  const root = roots[roots.length - 1];
  const loss = root && root.querySelector('[data-tm-chart="loss"]');
  if (!loss) return null;
  return {status: (root.querySelector('[data-tm="status"]')?.textContent || '').trim(),
          points: Number(loss.dataset.tmPoints || 0),
          legends: [...loss.querySelectorAll('.u-legend .u-series .u-label')].map((e) => e.textContent)};
}"""


def test_a_resumed_runs_loss_chart_draws_the_earlier_runs_curve_before_its_own(servers: Any, browser: Any,
                                                                               notebook_root: Path) -> None:
    server = servers.get("lab")
    nb_name = "lineage-lab.ipynb"
    write_notebook(notebook_root / nb_name, [SETUP_CELL, RESUME_CELL])
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, server, nb_name)
        run_all_cells(page, 2)
        read = None
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            read = page.evaluate(READ_JS, LIVE)
            # done: the run completed with the earlier runs' curve drawn (the chart reads 100 points at the end,
            # never the 200 this once waited for: it waited out all 150 s)
            if read and read["status"] == "completed" and "train loss, earlier runs" in read["legends"]:
                break
        page.keyboard.press("Escape")
        page.keyboard.press("Control+b")  # close the file browser: the dashboard gets the width
        page.wait_for_timeout(800)
        screenshot(page, "lineage-lab")
        plot = page.locator(LIVE).last.locator('[data-tm-chart="loss"] .u-over').first
        box = plot.bounding_box()
        page.mouse.move(box["x"] + 0.1 * box["width"], box["y"] + box["height"] / 2)  # the chart's left tenth
        page.wait_for_timeout(500)
        hovered = page.evaluate(HOVER_JS, LIVE)
    finally:
        context.close()
        server.shut_down(nb_name)
    assert read is not None and read["status"] == "completed", read
    assert "train loss, earlier runs" in read["legends"], read  # the parent's curve, drawn
    # the x axis spans the training: the left tenth of the chart is a step of the first run, with its loss there
    assert hovered is not None and 1 <= float(hovered["step"]) < 60, hovered
    assert hovered["parent"] not in ("", "—"), hovered
